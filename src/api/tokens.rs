//! The tokenizer routes' wire types: `/tokenize`, `/detokenize` (vLLM's shapes) and
//! `GET /tokenizer_info`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::WireMessage;

/// `POST /tokenize`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    /// Model id (optional).
    pub model: Option<String>,
    /// Text to tokenize.
    pub prompt: Option<String>,
    /// Or a conversation, rendered through the chat template.
    pub messages: Option<Vec<WireMessage>>,
    /// `false`: no BOS token is added (default true, as for prompts).
    pub add_special_tokens: Option<bool>,
    /// Functions, rendered by the chat template as a chat request's are (with `messages`).
    pub tools: Option<Vec<super::tools::Tool>>,
    /// More variables for the chat template (with `messages`), as vLLM takes them.
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `POST /detokenize`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    /// Model id (optional).
    pub model: Option<String>,
    /// Token ids.
    pub tokens: Vec<u32>,
}

/// `POST /tokenize` response.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct TokenizeResponse {
    /// Number of tokens.
    pub count: usize,
    /// Context length per sequence.
    pub max_model_len: usize,
    /// Token ids.
    pub tokens: Vec<u32>,
}

/// `POST /detokenize` response.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct DetokenizeResponse {
    /// The text of the tokens.
    pub prompt: String,
}

/// `GET /tokenizer_info`: what a remote-tokenizer client (lm-evaluation-harness's
/// `tokenizer_backend=remote`) needs besides `/tokenize` and `/detokenize`.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct TokenizerInfo {
    /// Text of the end-of-sequence token.
    pub eos_token: Option<String>,
    /// Text of the beginning-of-sequence token.
    pub bos_token: Option<String>,
    /// Whether prompts get the BOS token.
    pub add_bos_token: bool,
    /// Context length per sequence.
    pub model_max_length: usize,
    /// The chat template's source, when the model has one.
    pub chat_template: Option<String>,
}
