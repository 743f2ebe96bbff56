//! OpenAI-compatible endpoints, and what their answers share: ids, fingerprints and
//! token texts for logprobs.

pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod models;
pub mod rerank;
mod stream;
pub mod tokenize;

use std::collections::HashMap;

use sluice_engine::{PromptToken, TokenEvent, Tokenizer};

use crate::api::scoring::{PromptLogprob, PromptLogprobs};
use crate::validation::Validated;

/// Whether the choices' tokens come with logprobs.
fn want_logprobs(v: &Validated) -> bool {
    v.requests.first().is_some_and(|r| r.logprobs.is_some())
}

/// vLLM's `prompt_logprobs` of one prompt: null first, then per position the prompt's
/// token and the best `k` alternatives, keyed by token id.
fn prompt_logprobs(tok: &Tokenizer, p: &[PromptToken], k: usize) -> PromptLogprobs {
    p.iter()
        .map(|t| {
            let logprob = t.logprob?;
            let entry = |id: u32, rank, logprob| {
                let decoded_token = token_text(tok, id);
                (
                    id.to_string(),
                    PromptLogprob {
                        logprob,
                        rank,
                        decoded_token,
                    },
                )
            };
            let mut m: HashMap<_, _> = t
                .top
                .iter()
                .take(k)
                .enumerate()
                .map(|(r, &(id, l))| entry(id, r + 1, l))
                .collect();
            m.extend([entry(t.id, t.rank, logprob)]);
            Some(m)
        })
        .collect()
}

/// Keeps a stream's `system_fingerprint` on the weights that generated its latest token
/// (a request queued across a reload runs on the new weights, not those of its arrival).
fn fingerprint(current: &mut String, t: &TokenEvent) {
    if let Some(v) = &t.weights_version
        && **v != **current
    {
        *current = v.to_string();
    }
}

/// The text of one token, for logprob listings.
fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id]).unwrap_or_default()
}

/// A new request id with the given prefix.
fn request_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}
