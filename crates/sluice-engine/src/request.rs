//! What goes into the engine (a validated request) and what comes out (events).

use crate::constraint::Constraint;
use crate::error::EngineError;
use crate::sampling::SamplingParams;
use crate::thinking::ThinkSpec;

/// A request the engine can run. Built by `validation` from the wire types, which checks
/// every field; the engine trusts it.
#[derive(Clone, Debug)]
pub struct ValidRequest {
    /// Prompt token ids, at least one.
    pub prompt: Vec<u32>,
    /// Generated tokens at most; `prompt.len() + max_tokens <= context`.
    pub max_tokens: usize,
    /// End tokens and stop strings are ignored until this many tokens exist.
    pub min_tokens: usize,
    /// Sampling parameters; `seed` is `None` when the server should draw one.
    pub params: SamplingParams,
    /// Whether the caller gave a seed (else the engine draws one and reports it).
    pub seeded: bool,
    /// Token ids that end the sequence (the model's end tokens unless ignore-EOS, plus
    /// `stop_token_ids`).
    pub stop_ids: Vec<u32>,
    /// Strings that end the sequence; they and what follows are not returned.
    pub stop_strings: Vec<String>,
    /// Alternatives to report with each token's log-probability (`None`: no logprobs).
    pub logprobs: Option<usize>,
    /// Compute each token's log-probability even without `logprobs` (`best_of` ranks
    /// choices by their totals). Otherwise a token comes without it: its normaliser is a
    /// pass over the whole vocabulary per token.
    pub rank_by_logprob: bool,
    /// Route label for metrics (`completions`, `chat`, or `engine` for direct callers).
    pub route: &'static str,
    /// A compiled grammar the output must follow.
    pub constraint: Option<Constraint>,
    /// Report the prompt's log-probabilities with this many alternatives per token (an
    /// [`Event::Prompt`] before the first token). With it, `max_tokens` may be 0: the
    /// prompt is scored and nothing is generated.
    pub prompt_logprobs: Option<usize>,
    /// The prompt may reuse keys and values other requests left in the slab
    /// (docs/ARCHITECTURE.md, "Prefix reuse"); `cache_prompt: false` turns it off.
    pub cache_prompt: bool,
    /// Requests with the same key (the choices of one request) share their prompt's
    /// prefill even when `cache_prompt` is off.
    pub share: Option<u64>,
    /// Beam search instead of sampling: the results come as one [`Event::Beams`].
    pub beam: Option<BeamSpec>,
    /// A reasoning model's thinking section: the grammar applies after it, and its
    /// budget is enforced.
    pub thinking: Option<ThinkSpec>,
}

impl ValidRequest {
    /// A greedy request for `max_tokens` tokens with no stops (tests, benchmarks).
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Self {
        Self {
            prompt,
            max_tokens,
            min_tokens: 0,
            params: SamplingParams::default(),
            seeded: true,
            stop_ids: Vec::new(),
            stop_strings: Vec::new(),
            logprobs: None,
            rank_by_logprob: false,
            route: "engine",
            constraint: None,
            prompt_logprobs: None,
            cache_prompt: true,
            share: None,
            beam: None,
            thinking: None,
        }
    }
}

/// Why a sequence stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end token, a stop token id or a stop string.
    Stop,
    /// `max_tokens` or the end of the context.
    Length,
}

impl FinishReason {
    /// OpenAI's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// One generated token.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenEvent {
    /// Token id.
    pub id: u32,
    /// Text that became final with this token (may be empty: held back, or an end token).
    pub text: String,
    /// Raw log-probability of the token: `None` unless the request asked for logprobs or
    /// ranks by them (`ValidRequest::rank_by_logprob`), or in a beam search's hypotheses.
    pub logprob: Option<f32>,
    /// Top alternatives when logprobs were asked for.
    pub top: Vec<(u32, f32)>,
    /// This token ended the sequence (an end or stop token id): its text is not output.
    pub is_end: bool,
    /// Version label of the weights that generated it (`None` in a beam search's
    /// hypotheses, whose `Done` names them).
    pub weights_version: Option<std::sync::Arc<str>>,
}

/// One prompt token with its log-probability under the tokens before it.
#[derive(Clone, Debug, PartialEq)]
pub struct PromptToken {
    /// Token id.
    pub id: u32,
    /// Raw log-probability; `None` for the first token, which has no context.
    pub logprob: Option<f32>,
    /// 1 + the number of tokens more likely at its position (0 for the first token).
    pub rank: usize,
    /// Best alternatives at its position (empty for the first token).
    pub top: Vec<(u32, f32)>,
}

/// One finished beam-search hypothesis.
#[derive(Clone, Debug, PartialEq)]
pub struct BeamOut {
    /// Its text (stop strings and end tokens not included).
    pub text: String,
    /// Its tokens with their raw log-probabilities (an end token last, `is_end` set).
    pub tokens: Vec<TokenEvent>,
    /// Why it ended.
    pub reason: FinishReason,
    /// Its length-penalised score.
    pub score: f64,
}

/// Totals reported when a sequence finishes.
#[derive(Clone, Debug, PartialEq)]
pub struct Finish {
    /// Why it stopped.
    pub reason: FinishReason,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens (the end token included).
    pub completion_tokens: usize,
    /// Version label of the weights that produced every token.
    pub weights_version: String,
    /// Seed of the random stream used.
    pub seed: u64,
    /// Seconds the request waited for a slot.
    pub queue_seconds: f64,
    /// Seconds from arrival to the first token.
    pub ttft_seconds: f64,
    /// The stop string that ended it (`None`: an end token, a stop id, or the length).
    pub stop_string: Option<String>,
    /// Of the completion tokens, those of the thinking section (its markers included).
    pub reasoning_tokens: usize,
}

/// What a request's stream carries.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The prompt's tokens and log-probabilities, when asked for; before any token.
    Prompt(Vec<PromptToken>),
    /// A beam search's `n` best hypotheses, best first; `Done` follows.
    Beams(Vec<BeamOut>),
    /// A token was generated.
    Token(TokenEvent),
    /// The sequence finished; nothing follows.
    Done(Finish),
    /// The sequence ended without finishing; nothing follows.
    Error(EngineError),
}

/// Beam search, as the request asked for it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BeamSpec {
    /// Beams kept each step (at least `n`).
    pub width: usize,
    /// Hypotheses returned, best first.
    pub n: usize,
    /// Scores are `cumulative logprob / length ^ length_penalty` (vLLM's: the length counts
    /// the prompt, not a final end token).
    pub length_penalty: f32,
}
