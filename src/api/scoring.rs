//! Prompt scoring on the wire: vLLM's `prompt_logprobs`.

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
