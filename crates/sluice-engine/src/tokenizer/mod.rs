//! Tokenisation (built from the GGUF vocabulary or a `tokenizer.json`), the chat template
//! and UTF-8-safe incremental detokenisation.

mod chat;
mod gguf_vocab;
mod incremental;

use std::path::Path;

pub use chat::{ChatMessage, ChatTemplate};
pub use incremental::IncrementalDecoder;

use crate::gguf::{GgufFile, ModelError};

/// Why text cannot be turned into tokens or back, or a conversation into a prompt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizerError {
    /// A `tokenizer.json` that cannot be loaded.
    #[error("tokenizer file {path}: {reason}")]
    File {
        /// The path.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The GGUF vocabulary cannot be turned into a tokenizer.
    #[error("the GGUF vocabulary: {0}")]
    Vocab(String),
    /// Text that cannot be encoded.
    #[error("the text cannot be tokenised: {0}")]
    Encode(String),
    /// Ids that cannot be decoded.
    #[error("the token ids cannot be decoded: {0}")]
    Decode(String),
    /// The model has no chat template.
    #[error(
        "this model has no chat template (tokenizer.chat_template); use the completions API \
         with a raw prompt"
    )]
    NoChatTemplate,
    /// The model's chat template does not compile.
    #[error("the chat template does not parse: {0}")]
    TemplateSyntax(String),
    /// The chat template refused the conversation (`raise_exception`) or failed on it.
    #[error("the chat template cannot render these messages: {0}")]
    Template(String),
}

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
    /// Wraps a `tokenizers` tokenizer with the ids that end generation (no chat template).
    pub fn new(inner: tokenizers::Tokenizer, end_ids: Vec<u32>) -> Self {
        Self {
            vocab_size: inner.get_vocab_size(true),
            inner,
            end_ids,
            chat_template: None,
        }
    }

    /// Builds the tokenizer from the GGUF metadata, or from `tokenizer_json` when given.
    pub fn from_gguf(file: &GgufFile, tokenizer_json: Option<&Path>) -> Result<Self, ModelError> {
        let inner = match tokenizer_json {
            Some(p) => tokenizers::Tokenizer::from_file(p).map_err(|e| TokenizerError::File {
                path: p.display().to_string(),
                reason: e.to_string(),
            })?,
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
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError::Encode(e.to_string()))
    }

    /// Text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// The tokenizer in `tokenizer.json` form (what `--tokenizer` loads).
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        self.inner
            .to_string(false)
            .map_err(|e| TokenizerError::Vocab(e.to_string()))
    }

    /// Renders a conversation through the chat template with the generation prompt.
    pub fn apply_chat_template(&self, messages: &[ChatMessage]) -> Result<String, TokenizerError> {
        self.chat_template
            .as_ref()
            .ok_or(TokenizerError::NoChatTemplate)?
            .render(messages)
    }
}
