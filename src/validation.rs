//! The only way from wire requests to engine requests: every accepted field is checked
//! here, against every request limit of the server, and either honoured or refused with
//! an error that names it (docs/ARCHITECTURE.md, "One way down").

use sluice_engine::sampling::SamplingParams;
use sluice_engine::{ChatMessage, Tokenizer, TokenizerError, ValidRequest};

use crate::api::{
    ChatRequest, CommonParams, CompletionRequest, MessageContent, PromptInput, StopInput,
    WireMessage,
};

/// Why a request is refused before it reaches the engine.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    /// A field has a value the server cannot honour.
    #[error("{message}")]
    Invalid {
        /// The field.
        param: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A field exceeds one of the server's configured limits.
    #[error("{what} is {got}, above this server's limit of {limit}")]
    Limit {
        /// The field.
        param: &'static str,
        /// What is limited, in words.
        what: &'static str,
        /// The limit.
        limit: usize,
        /// The request's value.
        got: usize,
    },
    /// The prompt and `max_tokens` do not fit the context.
    #[error("{message}")]
    ContextLength {
        /// `prompt` or `max_tokens`.
        param: &'static str,
        /// The numbers.
        message: String,
    },
    /// The `model` field names a model this server does not serve.
    #[error("The model `{0}` does not exist.")]
    ModelNotFound(String),
    /// The prompt or conversation cannot be tokenised or rendered.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

impl ValidationError {
    /// A refusal of `param`.
    pub fn invalid(param: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            param,
            message: message.into(),
        }
    }
}


/// Bounds on request fields.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The engine's context (prompt + max_tokens must fit).
    pub context: usize,
    /// Longest prompt in tokens (at most the context).
    pub max_prompt_tokens: usize,
    /// Largest `max_tokens`, and the default for chat requests that give none.
    pub max_new_tokens: usize,
    /// Most choices per prompt.
    pub max_n: usize,
    /// Most stop strings.
    pub max_stop: usize,
    /// Most `logit_bias` entries.
    pub max_logit_bias: usize,
    /// Most alternatives per token.
    pub max_top_logprobs: usize,
    /// Most prompts in one completions request.
    pub max_prompts: usize,
}

impl Limits {
    /// Defaults for an engine with `context` positions per slot.
    pub fn for_context(context: usize) -> Self {
        Self {
            context,
            max_prompt_tokens: context,
            max_new_tokens: context,
            max_n: 16,
            max_stop: 4,
            max_logit_bias: 300,
            max_top_logprobs: 20,
            max_prompts: 32,
        }
    }
}

/// A validated API request: the prompts, and the engine request to run for each of the
/// `n` choices of each prompt (`requests[p * n + i]`).
#[derive(Clone, Debug)]
pub struct Validated {
    /// Engine requests, one per choice.
    pub requests: Vec<ValidRequest>,
    /// Prompt text per prompt (for `echo`).
    pub prompt_texts: Vec<String>,
    /// Choices per prompt.
    pub n: usize,
    /// Stream as SSE.
    pub stream: bool,
    /// Send a usage chunk at the end of the stream.
    pub include_usage: bool,
    /// Prefix each completion with its prompt.
    pub echo: bool,
}

fn range(param: &'static str, v: Option<f32>, lo: f32, hi: f32, default: f32) -> Result<f32, ValidationError> {
    let x = v.unwrap_or(default);
    if !x.is_finite() || x < lo || x > hi {
        return Err(ValidationError::invalid(
            param,
            format!("`{param}` must be between {lo} and {hi}, got {x}"),
        ));
    }
    Ok(x)
}

/// Checks the `model` field against the served name.
pub fn check_model(model: Option<&str>, served: &str) -> Result<(), ValidationError> {
    match model {
        Some(m) if m != served => Err(ValidationError::ModelNotFound(m.to_string())),
        _ => Ok(()),
    }
}

fn check_ids(ids: &[u32], vocab: usize, param: &'static str) -> Result<(), ValidationError> {
    match ids.iter().find(|&&t| t as usize >= vocab) {
        Some(t) => Err(ValidationError::invalid(
            param,
            format!("token id {t} is outside the vocabulary of {vocab}"),
        )),
        None => Ok(()),
    }
}

/// The fields common to both endpoints, for prompts already tokenised.
#[allow(clippy::too_many_arguments)]
fn build(
    c: &CommonParams,
    prompts: Vec<Vec<u32>>,
    default_max: Option<usize>,
    logprobs: Option<usize>,
    route: &'static str,
    tok: &Tokenizer,
    limits: &Limits,
) -> Result<(Vec<ValidRequest>, usize), ValidationError> {
    let vocab = tok.vocab_size;
    let n = c.n.unwrap_or(1);
    if n < 1 || n as usize > limits.max_n {
        return Err(ValidationError::invalid(
            "n",
            format!("`n` must be between 1 and {}, got {n}", limits.max_n),
        ));
    }
    let n = n as usize;
    let temperature = range("temperature", c.temperature, 0.0, 2.0, 1.0)?;
    let top_p = range("top_p", c.top_p, 0.0, 1.0, 1.0)?;
    if top_p <= 0.0 {
        return Err(ValidationError::invalid("top_p", "`top_p` must be greater than 0"));
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
            "stop",
            format!(
                "at most {} stop strings are allowed, got {}",
                limits.max_stop,
                stop_strings.len()
            ),
        ));
    }
    if stop_strings.iter().any(String::is_empty) {
        return Err(ValidationError::invalid("stop", "stop strings must not be empty"));
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
        None => (rand_seed(), n > 1),
    };
    let mut requests = Vec::with_capacity(prompts.len() * n);
    for prompt in prompts {
        if prompt.is_empty() {
            return Err(ValidationError::invalid("prompt", "the prompt has no tokens"));
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
            Some(m) if m < 1 => {
                return Err(ValidationError::invalid(
                    "max_tokens",
                    format!("`max_tokens` must be at least 1, got {m}"),
                ));
            }
            Some(m) if m as usize > limits.max_new_tokens => {
                return Err(ValidationError::Limit {
                    param: "max_tokens",
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
                param: "max_tokens",
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
        if min_tokens as usize > max_tokens {
            return Err(ValidationError::invalid(
                "min_tokens",
                format!("`min_tokens` ({min_tokens}) must not exceed max_tokens ({max_tokens})"),
            ));
        }
        for i in 0..n {
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
                route,
            });
        }
    }
    Ok((requests, n))
}

fn rand_seed() -> u64 {
    let u = uuid::Uuid::new_v4();
    u.as_u64_pair().0
}

/// Validates `POST /v1/completions`.
pub fn completion(
    r: &CompletionRequest,
    tok: &Tokenizer,
    limits: &Limits,
    served: &str,
) -> Result<Validated, ValidationError> {
    check_model(r.common.model.as_deref(), served)?;
    let logprobs = match r.logprobs {
        None => None,
        Some(k) if k < 0 || k as usize > limits.max_top_logprobs => {
            return Err(ValidationError::invalid(
                "logprobs",
                format!(
                    "`logprobs` must be between 0 and {}, got {k}",
                    limits.max_top_logprobs
                ),
            ));
        }
        Some(k) => Some(k as usize),
    };
    if r.echo && logprobs.is_some() {
        return Err(ValidationError::invalid(
            "echo",
            "`echo` together with `logprobs` (prompt log-probabilities) is not supported",
        ));
    }
    let (prompts, texts): (Vec<Vec<u32>>, Vec<String>) = match &r.prompt {
        PromptInput::Text(t) => (vec![tok.encode(t)?], vec![t.clone()]),
        PromptInput::Texts(ts) => {
            let mut ids = Vec::new();
            for t in ts {
                ids.push(tok.encode(t)?);
            }
            (ids, ts.clone())
        }
        PromptInput::Ids(ids) => {
            check_ids(ids, tok.vocab_size, "prompt")?;
            (vec![ids.clone()], vec![tok.decode(ids)?])
        }
        PromptInput::IdLists(lists) => {
            let mut texts = Vec::new();
            for ids in lists {
                check_ids(ids, tok.vocab_size, "prompt")?;
                texts.push(tok.decode(ids)?);
            }
            (lists.clone(), texts)
        }
    };
    if prompts.is_empty() || prompts.len() > limits.max_prompts {
        return Err(ValidationError::invalid(
            "prompt",
            format!("give between 1 and {} prompts", limits.max_prompts),
        ));
    }
    let (requests, n) = build(
        &r.common,
        prompts,
        Some(16),
        logprobs,
        "completions",
        tok,
        limits,
    )?;
    Ok(Validated {
        requests,
        prompt_texts: texts,
        n,
        stream: r.common.stream,
        include_usage: r
            .common
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage),
        echo: r.echo,
    })
}

/// Turns wire messages into template messages, refusing non-text content.
pub fn messages(msgs: &[WireMessage]) -> Result<Vec<ChatMessage>, ValidationError> {
    if msgs.is_empty() {
        return Err(ValidationError::invalid(
            "messages",
            "`messages` must not be empty",
        ));
    }
    msgs.iter()
        .map(|m| {
            let content = match &m.content {
                None => String::new(),
                Some(MessageContent::Text(t)) => t.clone(),
                Some(MessageContent::Parts(parts)) => {
                    let mut s = String::new();
                    for p in parts {
                        match (p.kind.as_str(), &p.text) {
                            ("text", Some(t)) => s.push_str(t),
                            _ => {
                                return Err(ValidationError::invalid(
                                    "messages",
                                    format!(
                                        "content parts of type `{}` are not supported; only text",
                                        p.kind
                                    ),
                                ));
                            }
                        }
                    }
                    s
                }
            };
            Ok(ChatMessage {
                role: m.role.clone(),
                content,
            })
        })
        .collect()
}

/// Validates `POST /v1/chat/completions`.
pub fn chat(
    r: &ChatRequest,
    tok: &Tokenizer,
    limits: &Limits,
    served: &str,
) -> Result<Validated, ValidationError> {
    check_model(r.common.model.as_deref(), served)?;
    let text = tok.apply_chat_template(&messages(&r.messages)?)?;
    let prompt = tok.encode(&text)?;
    let logprobs = match (r.logprobs, r.top_logprobs) {
        (_, Some(k)) if k < 0 || k as usize > limits.max_top_logprobs => {
            return Err(ValidationError::invalid(
                "top_logprobs",
                format!(
                    "`top_logprobs` must be between 0 and {}, got {k}",
                    limits.max_top_logprobs
                ),
            ));
        }
        (false, Some(_)) => {
            return Err(ValidationError::invalid(
                "top_logprobs",
                "`top_logprobs` needs `logprobs: true`",
            ));
        }
        (true, k) => Some(k.unwrap_or(0) as usize),
        (false, None) => None,
    };
    let mut common = r.common.clone();
    if let Some(m) = r.max_completion_tokens {
        if common.max_tokens.is_some_and(|x| x != m) {
            return Err(ValidationError::invalid(
                "max_completion_tokens",
                "`max_tokens` and `max_completion_tokens` disagree",
            ));
        }
        common.max_tokens = Some(m);
    }
    let (requests, n) = build(&common, vec![prompt], None, logprobs, "chat", tok, limits)?;
    Ok(Validated {
        requests,
        prompt_texts: vec![text],
        n,
        stream: common.stream,
        include_usage: common
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage),
        echo: false,
    })
}
