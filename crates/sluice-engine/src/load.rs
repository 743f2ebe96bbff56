//! Loading: a GGUF file or a Hugging Face folder becomes a model and its tokenizer, each
//! failure named; and the one warm-up token run before an engine starts.

use std::path::{Path, PathBuf};

use crate::error::ModelError;
use crate::gguf::GgufFile;
use crate::hf;
use crate::kv::{KvSlab, TokenRow};
use crate::model::{self, Model};
use crate::tokenizer::Tokenizer;

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
    // A folder's tokenizer is its tokenizer.json.
    let tokenizer_json = options
        .tokenizer
        .clone()
        .or_else(|| path.is_dir().then(|| path.join("tokenizer.json")));
    build(file, tokenizer_json.as_deref(), template.as_deref())
}

/// Builds the model and tokenizer of a file already open (or read into memory): what
/// [`load`] does after opening, and what the model-file fuzz target runs.
pub fn build(
    file: GgufFile,
    tokenizer_json: Option<&Path>,
    template: Option<&str>,
) -> Result<Loaded, ModelError> {
    let model = model::load(&file)?;
    let tokenizer = Tokenizer::from_gguf(&file, tokenizer_json, template)?;
    consistent(model.shape().vocab, &tokenizer)?;
    Ok(Loaded {
        model,
        tokenizer,
        file,
    })
}

/// Runs one token through the model before the engine starts, so the first client does
/// not pay for cold caches and the compute threads.
pub fn warm_up(model: &dyn Model) {
    let s = model.shape();
    let mut kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, 1, 16);
    let row = TokenRow {
        token: 0,
        slot: 0,
        pos: 0,
    };
    model.forward(&mut kv, &[row], &[0]);
}
