//! Prompt scoring on the wire: vLLM's `prompt_logprobs` and `GET /tokenizer_info`.

use std::collections::HashMap;

use serde::Serialize;
use utoipa::ToSchema;

/// One token at a prompt position, in vLLM's `prompt_logprobs` format.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct PromptLogprob {
    /// Raw log-probability at that position.
    pub logprob: f32,
    /// 1 for the most likely token.
    pub rank: usize,
    /// Its text.
    pub decoded_token: String,
}

/// Per prompt position (the first is null): token id (a string) to its score; the prompt's
/// own token and the asked-for number of best alternatives.
pub type PromptLogprobs = Vec<Option<HashMap<String, PromptLogprob>>>;

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
