//! Tokenisation (built from the GGUF vocabulary or a `tokenizer.json`), the chat template
//! and UTF-8-safe incremental detokenisation.

mod chat;
mod gguf_vocab;
mod incremental;

use std::path::Path;

pub use chat::{ChatMessage, ChatTemplate};
pub use incremental::IncrementalDecoder;

use crate::engine::model::{GgufFile, ModelError};

/// The model's tokenizer plus the special ids the engine needs.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Ids that end generation (EOS and the other end-of-turn control tokens).
    pub end_ids: Vec<u32>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Chat template, when the model has one.
    pub chat_template: Option<ChatTemplate>,
}

impl Tokenizer {
    /// Builds the tokenizer from the GGUF metadata, or from `tokenizer_json` when given.
    pub fn from_gguf(file: &GgufFile, tokenizer_json: Option<&Path>) -> Result<Self, ModelError> {
        let inner = match tokenizer_json {
            Some(p) => tokenizers::Tokenizer::from_file(p)
                .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", p.display())))?,
            None => gguf_vocab::build(file)?,
        };
        let vocab_size = inner.get_vocab_size(true);
        let end_ids = gguf_vocab::end_ids(file, &inner);
        let chat_template = file
            .get_str("tokenizer.chat_template")
            .ok()
            .map(|t| ChatTemplate::new(t, &inner, file))
            .transpose()?;
        Ok(Self {
            inner,
            end_ids,
            vocab_size,
            chat_template,
        })
    }

    /// Token ids of `text`, with special tokens such as `<|im_start|>` parsed as single
    /// ids and no BOS added (the prompt or the chat template carries it when wanted).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| ModelError::Tokenizer(e.to_string()))
    }

    /// Text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))
    }

    /// The token's string in the vocabulary (byte-level form), for logprob listings.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The tokenizer in `tokenizer.json` form (what `--tokenizer` loads).
    pub fn to_json(&self) -> Result<String, ModelError> {
        self.inner
            .to_string(false)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))
    }

    /// Renders a conversation through the chat template with the generation prompt.
    pub fn apply_chat_template(&self, messages: &[ChatMessage]) -> Result<String, ModelError> {
        self.chat_template
            .as_ref()
            .ok_or_else(|| {
                ModelError::Tokenizer(
                    "this model has no chat template (tokenizer.chat_template); \
                     use the completions API with a raw prompt"
                        .into(),
                )
            })?
            .render(messages)
    }
}
