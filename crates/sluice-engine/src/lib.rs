//! sluice's engine: everything between a validated request and its tokens, with no HTTP.
//!
//! - Loading: [`gguf`] (the memory-mapped file), [`model`] (the architecture registry and
//!   the shared blocks), [`tokenizer`] (vocabulary, chat template, incremental decoding),
//!   [`checkpoint`] (what a reload may swap in). [`load`] does all of it for one file.
//! - Running: [`EngineHandle::start`] spawns the engine thread, which alone owns the
//!   model, the KV slab ([`kv`]) and the slots; [`EngineHandle::submit`] queues a
//!   [`ValidRequest`] and returns its stream of [`Event`]s. Scheduling policy is pure
//!   ([`scheduler`]); sampling is per request ([`sampling`]).
//!
//! docs/ARCHITECTURE.md describes the data path and the rules the engine keeps.

mod beam;
#[cfg(test)]
mod beam_tests;
pub mod checkpoint;
pub mod constraint;
#[cfg(test)]
mod constraint_tests;
pub mod failpoint;
pub mod gguf;
mod handle;
pub mod hf;
pub mod kv;
pub mod metrics;
pub mod model;
#[cfg(test)]
mod prefill_tests;
pub mod prefix;
mod reload;
mod request;
pub mod sampling;
pub mod scheduler;
mod sequence;
mod slots;
mod stops;
pub mod tokenizer;
mod worker;
#[cfg(test)]
mod worker_tests;

use std::path::{Path, PathBuf};

pub use constraint::{Constraint, GrammarSpec, Grammars};
pub use gguf::{GgufFile, ModelError};
pub use handle::{EngineConfig, EngineHandle, EventStream, SubmitError};
pub use model::{Model, Shape, TokenRow};
pub use reload::{ReloadMode, Swapped};
pub use request::{
    BeamOut, BeamSpec, EngineError, Event, Finish, FinishReason, PromptToken, TokenEvent,
    ValidRequest,
};
pub use tokenizer::{ChatMessage, Tokenizer, TokenizerError};

/// A model file loaded and ready to start an engine on.
pub struct Loaded {
    /// The model.
    pub model: Box<dyn Model>,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// The open file (its header, for checkpoint signatures).
    pub file: GgufFile,
}

/// What may replace parts of a model file at load time.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// A `tokenizer.json` replacing the file's vocabulary.
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template file replacing the file's (or the family's built-in) one.
    pub chat_template: Option<PathBuf>,
    /// What a Hugging Face folder's weight matrices become.
    pub quantize: hf::Quantize,
}

/// Opens a model: a GGUF file, or a Hugging Face folder converted in memory.
pub fn open_model(path: &Path, quantize: hf::Quantize) -> Result<GgufFile, ModelError> {
    if path.is_dir() {
        hf::open(path, quantize)
    } else {
        GgufFile::open(path)
    }
}

/// Refuses a tokenizer that can produce ids the model has no embedding row for (a
/// `--tokenizer` of another model), which would otherwise fail on the engine thread at
/// the first such id.
fn consistent(rows: usize, tok: &Tokenizer) -> Result<(), ModelError> {
    if tok.vocab_size > rows {
        return Err(ModelError::Unsupported(format!(
            "the tokenizer has {} ids but the model's embedding (token_embd.weight) has {rows} \
             rows: the tokenizer is not this model's",
            tok.vocab_size
        )));
    }
    let specials = tok.bos.iter().chain(&tok.end_ids);
    if let Some(id) = specials.copied().find(|&id| id as usize >= rows) {
        return Err(ModelError::Unsupported(format!(
            "special token id {id} (BOS or an end token) is outside the model's {rows} \
             embedding rows"
        )));
    }
    Ok(())
}

/// Opens a GGUF model file and builds its model and tokenizer. Every failure names its
/// cause.
pub fn load(path: &Path, options: &LoadOptions) -> Result<Loaded, ModelError> {
    let template = match &options.chat_template {
        Some(p) => Some(
            std::fs::read_to_string(p).map_err(|reason| ModelError::Open {
                path: p.clone(),
                reason,
            })?,
        ),
        None => None,
    };
    let file = open_model(path, options.quantize)?;
    let model = model::load(&file)?;
    // A folder's tokenizer is its tokenizer.json.
    let tokenizer_json = options
        .tokenizer
        .clone()
        .or_else(|| path.is_dir().then(|| path.join("tokenizer.json")));
    let tokenizer = Tokenizer::from_gguf(&file, tokenizer_json.as_deref(), template.as_deref())?;
    consistent(model.shape().vocab, &tokenizer)?;
    Ok(Loaded {
        model,
        tokenizer,
        file,
    })
}
