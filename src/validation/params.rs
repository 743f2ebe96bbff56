//! The fields both endpoints share: sampling parameters, stops, bias, `n`, seeds, and
//! `max_tokens` against the context and the server's limits.

use sluice_engine::SamplingParams;
use sluice_engine::{BeamSpec, Tokenizer, ValidRequest};

use super::{Fields, Limits, ValidationError};
use crate::api::{CommonParams, StopInput};

fn range(
    param: &'static str,
    v: Option<f32>,
    lo: f32,
    hi: f32,
    default: f32,
) -> Result<f32, ValidationError> {
    let x = v.unwrap_or(default);
    if !x.is_finite() || x < lo || x > hi {
        return Err(ValidationError::invalid(
            param,
            format!("`{param}` must be between {lo} and {hi}, got {x}"),
        ));
    }
    Ok(x)
}

pub(super) fn check_ids(
    ids: &[u32],
    vocab: usize,
    param: &'static str,
) -> Result<(), ValidationError> {
    match ids.iter().find(|&&t| t as usize >= vocab) {
        Some(t) => Err(ValidationError::invalid(
            param,
            format!("token id {t} is outside the vocabulary of {vocab}"),
        )),
        None => Ok(()),
    }
}

/// What an endpoint adds to the common fields.
#[derive(Clone, Copy, Debug)]
pub(super) struct Endpoint {
    /// `completions` or `chat`.
    pub route: &'static str,
    /// What the client's API calls the fields.
    pub fields: Fields,
    /// `max_tokens` when the client gave none (else the rest of the context).
    pub default_max: Option<usize>,
    /// Alternatives per generated token, when logprobs were asked for.
    pub logprobs: Option<usize>,
    /// Alternatives per prompt token for `echo` with `logprobs`.
    pub echo_scores: Option<usize>,
    /// Choices to generate per prompt (`best_of`), when more than `n`.
    pub best_of: Option<usize>,
}

/// `prompt_logprobs`, checked.
fn prompt_logprobs(c: &CommonParams, limits: &Limits) -> Result<Option<usize>, ValidationError> {
    match c.prompt_logprobs {
        None => Ok(None),
        Some(k) if k < 0 || k as usize > limits.max_top_logprobs => Err(ValidationError::invalid(
            "prompt_logprobs",
            format!(
                "`prompt_logprobs` must be between 0 and {}, got {k}",
                limits.max_top_logprobs
            ),
        )),
        Some(k) => Ok(Some(k as usize)),
    }
}

/// `use_beam_search` and `length_penalty`, checked: beam search keeps the most likely
/// beams, so every field that would change which tokens are likely is refused, by name.
fn beam_spec(
    c: &CommonParams,
    at: &Endpoint,
    n: usize,
    limits: &Limits,
) -> Result<Option<BeamSpec>, ValidationError> {
    let bad = |msg: String| Err(ValidationError::invalid("use_beam_search", msg));
    if !c.use_beam_search {
        if c.length_penalty.is_some() {
            return Err(ValidationError::invalid(
                "length_penalty",
                "`length_penalty` applies to beam search only (`use_beam_search: true`)",
            ));
        }
        return Ok(None);
    }
    let unsupported = [
        ("temperature", c.temperature.is_some_and(|t| t != 0.0)),
        ("top_p", c.top_p.is_some_and(|p| p != 1.0)),
        ("top_k", c.top_k.is_some_and(|k| k > 0)),
        ("min_p", c.min_p.is_some_and(|p| p != 0.0)),
        (
            "presence_penalty",
            c.presence_penalty.is_some_and(|p| p != 0.0),
        ),
        (
            "frequency_penalty",
            c.frequency_penalty.is_some_and(|p| p != 0.0),
        ),
        (
            "repetition_penalty",
            c.repetition_penalty.is_some_and(|p| p != 1.0),
        ),
        (
            "logit_bias",
            c.logit_bias.as_ref().is_some_and(|b| !b.is_empty()),
        ),
        ("min_tokens", c.min_tokens.is_some_and(|m| m > 0)),
        ("stream", c.stream),
        ("prompt_logprobs", c.prompt_logprobs.is_some()),
        (
            "logprobs",
            at.logprobs.is_some_and(|k| k > 0) || at.echo_scores.is_some(),
        ),
    ];
    if let Some((name, _)) = unsupported.iter().find(|(_, set)| *set) {
        return bad(format!(
            "beam search cannot honour `{name}`: it keeps the most likely beams, whole, \
             and reports each token's log-probability without alternatives"
        ));
    }
    let width = at.best_of.unwrap_or(n);
    if width > limits.slots {
        return bad(format!(
            "beam search needs a slot per beam: {width} beams (`best_of`, else `n`), the \
             server has {} slots",
            limits.slots
        ));
    }
    let length_penalty = c.length_penalty.unwrap_or(1.0);
    if !length_penalty.is_finite() || !(-10.0..=10.0).contains(&length_penalty) {
        return Err(ValidationError::invalid(
            "length_penalty",
            format!("`length_penalty` must be between -10 and 10, got {length_penalty}"),
        ));
    }
    Ok(Some(BeamSpec {
        width,
        n,
        length_penalty,
    }))
}

/// The fields common to both endpoints, for prompts already tokenised: the engine
/// requests laid out `prompt * choices + i`, and `n`.
pub(super) fn build(
    c: &CommonParams,
    prompts: Vec<Vec<u32>>,
    at: Endpoint,
    tok: &Tokenizer,
    limits: &Limits,
) -> Result<(Vec<ValidRequest>, usize), ValidationError> {
    let (route, default_max, logprobs) = (at.route, at.default_max, at.logprobs);
    let vocab = tok.vocab_size;
    let n = c.n.unwrap_or(1);
    if n < 1 || n as usize > limits.max_n {
        return Err(ValidationError::invalid(
            "n",
            format!("`n` must be between 1 and {}, got {n}", limits.max_n),
        ));
    }
    let n = n as usize;
    let beam = beam_spec(c, &at, n, limits)?;
    let copies = if beam.is_some() {
        1
    } else {
        at.best_of.unwrap_or(n)
    };
    let scored = match (prompt_logprobs(c, limits)?, at.echo_scores) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let temperature = range("temperature", c.temperature, 0.0, 2.0, 1.0)?;
    let top_p = range("top_p", c.top_p, 0.0, 1.0, 1.0)?;
    if top_p <= 0.0 {
        return Err(ValidationError::invalid(
            "top_p",
            "`top_p` must be greater than 0",
        ));
    }
    let presence_penalty = range("presence_penalty", c.presence_penalty, -2.0, 2.0, 0.0)?;
    let frequency_penalty = range("frequency_penalty", c.frequency_penalty, -2.0, 2.0, 0.0)?;
    let min_p = range("min_p", c.min_p, 0.0, 1.0, 0.0)?;
    let repetition_penalty = range("repetition_penalty", c.repetition_penalty, 0.0, 10.0, 1.0)?;
    if repetition_penalty <= 0.0 {
        return Err(ValidationError::invalid(
            "repetition_penalty",
            "`repetition_penalty` must be greater than 0",
        ));
    }
    let top_k = match c.top_k.unwrap_or(0) {
        -1 | 0 => 0,
        k if k > 0 => k as usize,
        k => {
            return Err(ValidationError::invalid(
                "top_k",
                format!("`top_k` must be -1, 0 or positive, got {k}"),
            ));
        }
    };
    let stop_strings = match &c.stop {
        None => Vec::new(),
        Some(StopInput::One(s)) => vec![s.clone()],
        Some(StopInput::Many(v)) => v.clone(),
    };
    if stop_strings.len() > limits.max_stop {
        return Err(ValidationError::invalid(
            at.fields.stop,
            format!(
                "at most {} stop strings are allowed, got {}",
                limits.max_stop,
                stop_strings.len()
            ),
        ));
    }
    if stop_strings.iter().any(String::is_empty) {
        return Err(ValidationError::invalid(
            at.fields.stop,
            "stop strings must not be empty",
        ));
    }
    let mut logit_bias = Vec::new();
    if let Some(b) = &c.logit_bias {
        if b.len() > limits.max_logit_bias {
            return Err(ValidationError::invalid(
                "logit_bias",
                format!(
                    "at most {} logit_bias entries are allowed, got {}",
                    limits.max_logit_bias,
                    b.len()
                ),
            ));
        }
        for (k, v) in b {
            let id: u32 = k.parse().map_err(|_| {
                ValidationError::invalid(
                    "logit_bias",
                    format!("logit_bias key `{k}` is not a token id"),
                )
            })?;
            check_ids(&[id], vocab, "logit_bias")?;
            if !v.is_finite() || !(-100.0..=100.0).contains(v) {
                return Err(ValidationError::invalid(
                    "logit_bias",
                    format!("logit_bias values must be between -100 and 100, got {v}"),
                ));
            }
            logit_bias.push((id, *v));
        }
        logit_bias.sort_by_key(|e| e.0);
    }
    let mut stop_ids = if c.ignore_eos {
        Vec::new()
    } else {
        tok.end_ids.clone()
    };
    if let Some(extra) = &c.stop_token_ids {
        check_ids(extra, vocab, "stop_token_ids")?;
        stop_ids.extend(
            extra
                .iter()
                .copied()
                .filter(|t| !stop_ids.contains(t))
                .collect::<Vec<_>>(),
        );
    }
    let min_tokens = c.min_tokens.unwrap_or(0);
    if min_tokens < 0 {
        return Err(ValidationError::invalid(
            "min_tokens",
            "`min_tokens` must not be negative",
        ));
    }
    let (seed, seeded) = match c.seed {
        Some(s) => (s as u64, true),
        None => (rand_seed(), copies > 1),
    };
    let mut requests = Vec::with_capacity(prompts.len() * copies);
    for prompt in prompts {
        if prompt.is_empty() {
            return Err(ValidationError::invalid(
                "prompt",
                "the prompt has no tokens",
            ));
        }
        check_ids(&prompt, vocab, "prompt")?;
        if prompt.len() > limits.max_prompt_tokens.min(limits.context) {
            return Err(ValidationError::Limit {
                param: "prompt",
                what: "the prompt's length in tokens",
                limit: limits.max_prompt_tokens.min(limits.context),
                got: prompt.len(),
            });
        }
        let room = limits.context.saturating_sub(prompt.len());
        if room == 0 {
            return Err(ValidationError::ContextLength {
                param: "prompt",
                message: format!(
                    "the prompt has {} tokens; the context is {} tokens",
                    prompt.len(),
                    limits.context
                ),
            });
        }
        let max_tokens = match c.max_tokens {
            // 0 scores the prompt without generating.
            Some(0) if scored.is_some() => 0,
            Some(m) if m < 1 => {
                return Err(ValidationError::invalid(
                    at.fields.max_tokens,
                    format!(
                        "`max_tokens` must be at least 1, got {m} (0 only scores a prompt: \
                         with `echo` and `logprobs`, or `prompt_logprobs`)"
                    ),
                ));
            }
            Some(m) if m as usize > limits.max_new_tokens => {
                return Err(ValidationError::Limit {
                    param: at.fields.max_tokens,
                    what: "max_tokens",
                    limit: limits.max_new_tokens,
                    got: m as usize,
                });
            }
            Some(m) => m as usize,
            // What the client did not ask for is never refused: the default fits.
            None => default_max
                .unwrap_or(room)
                .min(room)
                .min(limits.max_new_tokens),
        };
        if prompt.len() + max_tokens > limits.context {
            return Err(ValidationError::ContextLength {
                param: at.fields.max_tokens,
                message: format!(
                    "this request needs {} prompt tokens + {} max_tokens = {} tokens, more than \
                     the context of {} tokens",
                    prompt.len(),
                    max_tokens,
                    prompt.len() + max_tokens,
                    limits.context
                ),
            });
        }
        let width = beam.map_or(1, |b| b.width);
        if width > 1 && prompt.len() + width * max_tokens > limits.kv_tokens {
            return Err(ValidationError::ContextLength {
                param: at.fields.max_tokens,
                message: format!(
                    "this beam search needs {} prompt tokens + {width} beams x {max_tokens} \
                     max_tokens = {} positions of the KV pool, which holds {} \
                     (--kv-cache-tokens)",
                    prompt.len(),
                    prompt.len() + width * max_tokens,
                    limits.kv_tokens
                ),
            });
        }
        if min_tokens as usize > max_tokens {
            return Err(ValidationError::invalid(
                "min_tokens",
                format!("`min_tokens` ({min_tokens}) must not exceed max_tokens ({max_tokens})"),
            ));
        }
        // The choices of one prompt share its prefill (docs/ARCHITECTURE.md, "Prefix reuse").
        let share = (copies > 1).then(rand_seed);
        for i in 0..copies {
            requests.push(ValidRequest {
                prompt: prompt.clone(),
                max_tokens,
                min_tokens: min_tokens as usize,
                params: SamplingParams {
                    temperature,
                    top_k,
                    top_p,
                    min_p,
                    presence_penalty,
                    frequency_penalty,
                    repetition_penalty,
                    logit_bias: logit_bias.clone(),
                    // Choice i of n uses seed + i, so choices differ but reproduce
                    // (docs/ARCHITECTURE.md, "Sampling").
                    seed: seed.wrapping_add(i as u64),
                },
                seeded,
                stop_ids: stop_ids.clone(),
                stop_strings: stop_strings.clone(),
                logprobs,
                rank_by_logprob: copies > n,
                route,
                constraint: None,
                prompt_logprobs: scored,
                cache_prompt: c.cache_prompt.unwrap_or(true),
                share,
                beam,
                thinking: None,
            });
        }
    }
    Ok((requests, n))
}

fn rand_seed() -> u64 {
    let u = uuid::Uuid::new_v4();
    u.as_u64_pair().0
}
