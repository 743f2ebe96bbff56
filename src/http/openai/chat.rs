//! `POST /v1/chat/completions`.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};

use super::stream::{ChunkMaker, Frames};
use super::{fingerprint, prompt_logprobs, request_id, token_text, want_logprobs};
use crate::api::tools::{FunctionCall, FunctionCallDelta, ToolCall, ToolCallDelta};
use crate::api::{
    ChatChoice, ChatChunk, ChatChunkChoice, ChatDelta, ChatLogprobs, ChatMessageOut, ChatRequest,
    ChatResponse, ChatTokenLogprob, GenerationErrors, TopLogprob, Usage,
};
use crate::http::AppState;
use crate::http::generate::{Api, Choice, route, validate_chat};
use crate::tools::parse::ParsedCall;
use crate::tools::stream::{CallDelta, Piece};
use crate::validation::{Fields, Validated, ValidationError};
use sluice_engine::{Finish, FinishReason, TokenEvent, Tokenizer};

/// Logprobs of `tokens` in the chat format.
fn logprobs(tok: &Tokenizer, tokens: &[TokenEvent]) -> ChatLogprobs {
    let entry = |id: u32, logprob: f32| {
        let token = token_text(tok, id);
        TopLogprob {
            bytes: token.as_bytes().to_vec(),
            token,
            logprob,
        }
    };
    ChatLogprobs {
        content: tokens
            .iter()
            .filter(|t| !t.is_end)
            .map(|t| {
                // Computed for every token of a request with logprobs.
                let e = entry(t.id, t.logprob.unwrap_or(f32::NAN));
                ChatTokenLogprob {
                    token: e.token,
                    logprob: e.logprob,
                    bytes: e.bytes,
                    top_logprobs: t.top.iter().map(|&(id, l)| entry(id, l)).collect(),
                }
            })
            .collect(),
    }
}

struct Chunks {
    tok: Arc<Tokenizer>,
    base: ChatChunk,
    choices: usize,
    want_logprobs: bool,
}

/// A response's id for a call.
fn call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// The calls of a finished answer in the response shape.
fn tool_calls(calls: Vec<ParsedCall>) -> Vec<ToolCall> {
    calls
        .into_iter()
        .map(|c| ToolCall {
            id: call_id(),
            kind: "function".into(),
            function: FunctionCall {
                name: c.name,
                arguments: c.arguments,
            },
        })
        .collect()
}

impl Chunks {
    fn chunk(&self, choice: ChatChunkChoice) -> String {
        let mut c = self.base.clone();
        c.choices = vec![choice];
        serde_json::to_string(&c).expect("chat chunks serialise")
    }

    fn delta(
        &self,
        index: usize,
        content: Option<String>,
        tool_calls: Option<Vec<ToolCallDelta>>,
        logprobs: Option<ChatLogprobs>,
        finish_reason: Option<&'static str>,
    ) -> String {
        self.chunk(ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content,
                reasoning_content: None,
                tool_calls,
            },
            logprobs,
            finish_reason,
        })
    }

    /// A delta of thinking text.
    fn thought(&self, index: usize, text: String, logprobs: Option<ChatLogprobs>) -> String {
        self.chunk(ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content: None,
                reasoning_content: Some(text),
                tool_calls: None,
            },
            logprobs,
            finish_reason: None,
        })
    }

    /// Each piece of a call as a delta: its start with index, id, type and name (and
    /// the arguments so far), then more of its arguments.
    fn call_chunks(&self, index: usize, calls: Vec<CallDelta>) -> Vec<String> {
        calls
            .into_iter()
            .filter(|d| d.name.is_some() || !d.arguments.is_empty())
            .map(|d| {
                let start = d.name.is_some();
                let delta = ToolCallDelta {
                    index: d.index,
                    id: start.then(call_id),
                    kind: start.then_some("function"),
                    function: FunctionCallDelta {
                        name: d.name,
                        arguments: Some(d.arguments),
                    },
                };
                self.delta(index, None, Some(vec![delta]), None, None)
            })
            .collect()
    }
}

impl ChunkMaker for Chunks {
    fn start(&mut self) -> Vec<String> {
        (0..self.choices)
            .map(|index| {
                self.chunk(ChatChunkChoice {
                    index,
                    delta: ChatDelta {
                        role: Some("assistant"),
                        content: Some(String::new()),
                        reasoning_content: None,
                        tool_calls: None,
                    },
                    logprobs: None,
                    finish_reason: None,
                })
            })
            .collect()
    }

    fn token(&mut self, index: usize, t: &TokenEvent, piece: Piece) -> Vec<String> {
        fingerprint(&mut self.base.system_fingerprint, t);
        let lp =
            (self.want_logprobs && !t.is_end).then(|| logprobs(&self.tok, std::slice::from_ref(t)));
        let mut lp = lp;
        let mut out = Vec::new();
        if !piece.reasoning.is_empty() {
            out.push(self.thought(index, piece.reasoning, lp.take()));
        }
        if !piece.content.is_empty() || lp.is_some() {
            out.push(self.delta(index, Some(piece.content), None, lp, None));
        }
        out.extend(self.call_chunks(index, piece.calls));
        out
    }

    fn done(&mut self, index: usize, f: &Finish, rest: Piece, called: bool) -> Vec<String> {
        let mut out = Vec::new();
        if !rest.reasoning.is_empty() {
            out.push(self.thought(index, rest.reasoning, None));
        }
        if !rest.content.is_empty() {
            out.push(self.delta(index, Some(rest.content), None, None, None));
        }
        out.extend(self.call_chunks(index, rest.calls));
        out.push(self.delta(index, None, None, None, Some(reason(f, called))));
        out
    }

    fn usage(&mut self, u: Usage) -> String {
        let mut c = self.base.clone();
        c.choices = Vec::new();
        c.usage = Some(u);
        serde_json::to_string(&c).expect("usage chunk serialises")
    }
}

/// `tool_calls` when the answer stopped after calling, else how it ended.
fn reason(f: &Finish, called: bool) -> &'static str {
    match f.reason {
        FinishReason::Stop if called => "tool_calls",
        r => r.as_str(),
    }
}

/// A chat answer as it starts: its id, time and weights.
struct Chat {
    id: String,
    created: u64,
    fingerprint: String,
}

impl Api for Chat {
    type Request = ChatRequest;
    type Events = Frames<Chunks>;

    fn model(r: &ChatRequest) -> Option<&str> {
        r.common.model.as_deref()
    }

    fn validate(r: &ChatRequest, s: &AppState) -> Result<Validated, ValidationError> {
        validate_chat(r, &Fields::OPENAI, s)
    }

    fn start(_: ChatRequest, _: &Validated, s: &AppState) -> Self {
        Chat {
            id: request_id("chatcmpl"),
            created: crate::http::unix_now(),
            fingerprint: s.engine.weights_version().to_string(),
        }
    }

    fn events(self, v: &Validated, s: &AppState) -> Frames<Chunks> {
        let chunks = Chunks {
            tok: s.tokenizer.clone(),
            base: ChatChunk {
                id: self.id,
                object: "chat.completion.chunk",
                created: self.created,
                model: s.model_name.to_string(),
                system_fingerprint: self.fingerprint,
                choices: Vec::new(),
                usage: None,
            },
            choices: v.requests.len(),
            want_logprobs: want_logprobs(v),
        };
        Frames::new(chunks, v.include_usage)
    }

    fn answer(self, v: &Validated, choices: Vec<Choice>, usage: Usage, s: &AppState) -> Response {
        let mut resp = ChatResponse {
            id: self.id,
            object: "chat.completion",
            created: self.created,
            model: s.model_name.to_string(),
            system_fingerprint: self.fingerprint,
            choices: Vec::new(),
            usage,
            prompt_logprobs: v.prompt_logprobs.and_then(|k| {
                let first = choices.first()?;
                Some(prompt_logprobs(&s.tokenizer, &first.prompt, k))
            }),
        };
        for (index, c) in choices.into_iter().enumerate() {
            resp.system_fingerprint = c.finish.weights_version.clone();
            let called = !c.calls.is_empty();
            resp.choices.push(ChatChoice {
                index,
                logprobs: want_logprobs(v).then(|| logprobs(&s.tokenizer, &c.tokens)),
                message: ChatMessageOut {
                    role: "assistant",
                    content: (!c.text.is_empty() || !called).then_some(c.text),
                    reasoning_content: (!c.reasoning.is_empty()).then_some(c.reasoning),
                    tool_calls: called.then(|| tool_calls(c.calls)),
                },
                finish_reason: Some(reason(&c.finish, called)),
            });
        }
        axum::Json(resp).into_response()
    }
}

route! {
    /// Answers a conversation, whole or streamed.
    Chat: post "/v1/chat/completions", operation_id "create_chat_completion", tag "openai",
    ChatRequest => ChatResponse: "The answer; with `stream: true`, `text/event-stream` `ChatChunk`s, then `data: [DONE]`",
    GenerationErrors
}
