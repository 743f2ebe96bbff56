//! The only way from wire requests to engine requests: every accepted field is checked
//! here, against every request limit of the server, and either honoured or refused with
//! an error that names it (docs/ARCHITECTURE.md, "One way down").

pub mod anthropic;
pub mod embeddings;
mod params;
mod reasoning;
pub mod responses;
mod structured;
mod tools;

use sluice_engine::{ChatMessage, Grammars, Tokenizer, TokenizerError, ValidRequest};

use params::{Endpoint, build, check_ids};

use crate::api::{ChatRequest, CompletionRequest, MessageContent, PromptInput, WireMessage};
use crate::reasoning::ReasoningReader;
use crate::tools::{CallReader, ToolFormat};

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

/// What an API calls the chat fields it spells its own way: validation is told them, so
/// that a refusal's `param` names the field the client sent (its message keeps the chat
/// name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    /// The conversation (`messages`).
    pub messages: &'static str,
    /// The most tokens to generate (`max_tokens`).
    pub max_tokens: &'static str,
    /// The stop strings (`stop`).
    pub stop: &'static str,
    /// The output format (`response_format`).
    pub response_format: &'static str,
}

impl Fields {
    /// OpenAI's chat and completions names (also vLLM's `tokenize`).
    pub const OPENAI: Fields = Fields {
        messages: "messages",
        max_tokens: "max_tokens",
        stop: "stop",
        response_format: "response_format",
    };
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
    /// The longest sequence (prompt + max_tokens must fit).
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
    /// The engine's slots (a beam search needs one per beam).
    pub slots: usize,
    /// Positions of the KV pool (a beam search's beams must fit in it together).
    pub kv_tokens: usize,
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
            slots: 32,
            kv_tokens: 32 * context,
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
    /// Choices generated per prompt when more than `n` (`best_of`): `requests` holds
    /// `best_of` per prompt, and the `n` best by total log-probability are returned.
    pub best_of: Option<usize>,
    /// Beam search: one engine request per prompt, whose `n` hypotheses are the choices.
    pub beam: bool,
    /// vLLM's `prompt_logprobs`: alternatives per prompt token to report.
    pub prompt_logprobs: Option<usize>,
    /// How tool calls are read out of the answers, when the request has active tools.
    pub tools: Option<CallReader>,
    /// How the thinking is split out of the answers, when the model thinks.
    pub reasoning: Option<ReasoningReader>,
}

impl Validated {
    /// Choices generated per prompt: `best_of` when more than `n`, one beam search per
    /// prompt, else `n`.
    pub fn copies(&self) -> usize {
        if self.beam {
            1
        } else {
            self.best_of.unwrap_or(self.n)
        }
    }
}

/// Checks the `model` field against the served name.
pub fn check_model(model: Option<&str>, served: &str) -> Result<(), ValidationError> {
    match model {
        Some(m) if m != served => Err(ValidationError::ModelNotFound(m.to_string())),
        _ => Ok(()),
    }
}

/// `best_of`, checked against `n`, the limit and `stream`; `None` when it equals `n`.
fn best_of(r: &CompletionRequest, limits: &Limits) -> Result<Option<usize>, ValidationError> {
    let Some(b) = r.best_of else {
        return Ok(None);
    };
    let n = r.common.n.unwrap_or(1);
    if b < n || b as usize > limits.max_n {
        return Err(ValidationError::invalid(
            "best_of",
            format!(
                "`best_of` must be at least n ({n}) and at most {}, got {b}",
                limits.max_n
            ),
        ));
    }
    if b > n && r.common.stream {
        return Err(ValidationError::invalid(
            "best_of",
            "`best_of` greater than `n` cannot be streamed",
        ));
    }
    Ok((b > n).then_some(b as usize))
}

/// Validates `POST /v1/completions`.
pub fn completion(
    r: &CompletionRequest,
    tok: &Tokenizer,
    grammars: Option<&Grammars>,
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
    let best_of = best_of(r, limits)?;
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
    let constraint = structured::constraint(&r.common, grammars, &Fields::OPENAI)?;
    structured::compatible(&r.common, constraint.is_some())?;
    let at = Endpoint {
        route: "completions",
        fields: Fields::OPENAI,
        default_max: Some(16),
        logprobs,
        echo_scores: logprobs.filter(|_| r.echo),
        best_of,
    };
    let (mut requests, n) = build(&r.common, prompts, at, tok, limits)?;
    let beam = r.common.use_beam_search;
    if beam && constraint.is_some() {
        return Err(ValidationError::invalid(
            "use_beam_search",
            "beam search cannot follow a grammar (`response_format`, `structured_outputs`)",
        ));
    }
    for q in &mut requests {
        q.constraint = constraint.clone();
    }
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
        best_of: best_of.filter(|_| !beam),
        beam,
        prompt_logprobs: r.common.prompt_logprobs.map(|k| k as usize),
        tools: None,
        reasoning: None,
    })
}

/// Turns wire messages into template messages, refusing non-text content; `param` is
/// what the client's API calls them.
pub fn messages(
    msgs: &[WireMessage],
    param: &'static str,
) -> Result<Vec<ChatMessage>, ValidationError> {
    if msgs.is_empty() {
        return Err(ValidationError::invalid(
            param,
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
                                    param,
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
            Ok(ChatMessage::text(&m.role, &content))
        })
        .collect()
}

/// A conversation's prompt text as the chat template renders it, with `tools` and the
/// template's `kwargs` (`POST /tokenize`).
pub fn conversation_text(
    msgs: &[ChatMessage],
    tools: Option<&[crate::api::tools::Tool]>,
    kwargs: &serde_json::Map<String, serde_json::Value>,
    tok: &Tokenizer,
) -> Result<String, ValidationError> {
    tools::render(msgs, tools, kwargs, tok)
}

/// The number of tokens of a conversation's rendered prompt (tools included), whatever
/// the context size: what `count_tokens` answers.
pub fn prompt_tokens(
    r: &ChatRequest,
    tok: &Tokenizer,
    grammars: Option<&Grammars>,
    tool_parser: Option<ToolFormat>,
    served: &str,
) -> Result<usize, ValidationError> {
    let plan = conversation(r, &Fields::OPENAI, tok, grammars, tool_parser, served)?;
    Ok(tok.encode(&plan.text)?.len())
}

/// The model, the conversation and the tools of a chat request, checked, and its prompt
/// rendered.
fn conversation(
    r: &ChatRequest,
    fields: &Fields,
    tok: &Tokenizer,
    grammars: Option<&Grammars>,
    tool_parser: Option<ToolFormat>,
    served: &str,
) -> Result<tools::ToolPlan, ValidationError> {
    check_model(r.common.model.as_deref(), served)?;
    let mut msgs = messages(&r.messages, fields.messages)?;
    tools::history(&r.messages, &mut msgs, fields.messages)?;
    tools::plan(r, &msgs, tok, grammars, tool_parser)
}

/// Validates `POST /v1/chat/completions`, and the Responses and Messages requests made
/// chat requests; `fields` are the names the client's API gives the fields.
pub fn chat(
    r: &ChatRequest,
    fields: &Fields,
    tok: &Tokenizer,
    grammars: Option<&Grammars>,
    tool_parser: Option<ToolFormat>,
    limits: &Limits,
    served: &str,
) -> Result<Validated, ValidationError> {
    let plan = conversation(r, fields, tok, grammars, tool_parser, served)?;
    let text = plan.text;
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
    if plan.format.is_some()
        && let Some((name, param)) = structured::field(&common, fields)?
    {
        return Err(ValidationError::invalid(
            param,
            format!("`{name}` cannot be combined with tools; use `tool_choice: none`"),
        ));
    }
    let constraint = match (
        structured::constraint(&common, grammars, fields)?,
        plan.constraint,
    ) {
        (Some(_), Some(_)) => {
            return Err(ValidationError::invalid(
                "tool_choice",
                "a required tool call and `response_format` cannot both constrain the output",
            ));
        }
        (a, b) => a.or(b),
    };
    structured::compatible(&common, constraint.is_some())?;
    if common.use_beam_search {
        return Err(ValidationError::invalid(
            "use_beam_search",
            "beam search is served on /v1/completions only",
        ));
    }
    if common.stream && common.prompt_logprobs.is_some() {
        return Err(ValidationError::invalid(
            "prompt_logprobs",
            "`prompt_logprobs` is returned with whole chat answers only, not with `stream`",
        ));
    }
    let at = Endpoint {
        route: "chat",
        fields: *fields,
        default_max: None,
        logprobs,
        echo_scores: None,
        best_of: None,
    };
    reasoning::check(r)?;
    let budget = r.thinking_token_budget.map(|b| b as usize);
    let thinking = reasoning::plan(tok, &text, budget, plan.format)?;
    let (mut requests, n) = build(&common, vec![prompt], at, tok, limits)?;
    for q in &mut requests {
        q.constraint = constraint.clone();
        q.thinking = thinking.as_ref().map(|t| t.1.clone());
    }
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
        best_of: None,
        beam: false,
        prompt_logprobs: common.prompt_logprobs.map(|k| k as usize),
        tools: plan.format.map(|format| {
            CallReader::new(
                format,
                r.tools.as_deref().unwrap_or_default(),
                r.parallel_tool_calls.unwrap_or(true),
            )
        }),
        reasoning: thinking.map(|t| t.0),
    })
}
