//! `POST /v1/chat/completions`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::run::{self, ChunkMaker, request_id, token_text};
use crate::api::tools::{FunctionCall, FunctionCallDelta, ToolCall, ToolCallDelta};
use crate::api::{
    ChatChoice, ChatChunk, ChatChunkChoice, ChatDelta, ChatLogprobs, ChatMessageOut, ChatRequest,
    ChatResponse, ChatTokenLogprob, GenerationErrors, TopLogprob, Usage,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{AppState, off_thread};
use crate::tools::ToolStream;
use crate::tools::parse::{ParsedCall, parse};
use crate::tools::stream::Piece;
use crate::validation;
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
    /// Per choice, when the request has active tools.
    tools: Vec<ToolStream>,
    /// `parallel_tool_calls`: else only the first call is returned.
    parallel: bool,
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
                tool_calls,
            },
            logprobs,
            finish_reason,
        })
    }

    /// Each completed call as two deltas: index, id, type and name with empty arguments,
    /// then the arguments.
    fn call_chunks(&self, index: usize, calls: Vec<(usize, ParsedCall)>) -> Vec<String> {
        let mut out = Vec::new();
        for (i, c) in calls.into_iter().filter(|(i, _)| self.parallel || *i == 0) {
            let head = ToolCallDelta {
                index: i,
                id: Some(call_id()),
                kind: Some("function"),
                function: FunctionCallDelta {
                    name: Some(c.name),
                    arguments: Some(String::new()),
                },
            };
            let args = ToolCallDelta {
                index: i,
                id: None,
                kind: None,
                function: FunctionCallDelta {
                    name: None,
                    arguments: Some(c.arguments),
                },
            };
            out.push(self.delta(index, None, Some(vec![head]), None, None));
            out.push(self.delta(index, None, Some(vec![args]), None, None));
        }
        out
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
                        tool_calls: None,
                    },
                    logprobs: None,
                    finish_reason: None,
                })
            })
            .collect()
    }

    fn token(&mut self, index: usize, t: &TokenEvent) -> Vec<String> {
        run::fingerprint(&mut self.base.system_fingerprint, t);
        let lp =
            (self.want_logprobs && !t.is_end).then(|| logprobs(&self.tok, std::slice::from_ref(t)));
        let piece = match self.tools.get_mut(index) {
            Some(s) => s.push(&t.text),
            None => Piece {
                content: t.text.clone(),
                calls: Vec::new(),
            },
        };
        let mut out = Vec::new();
        if !piece.content.is_empty() || lp.is_some() {
            out.push(self.delta(index, Some(piece.content), None, lp, None));
        }
        out.extend(self.call_chunks(index, piece.calls));
        out
    }

    fn done(&mut self, index: usize, f: &Finish) -> Vec<String> {
        let mut out = Vec::new();
        let mut reason = f.reason.as_str();
        if let Some(s) = self.tools.get_mut(index) {
            let piece = s.finish();
            let called = s.calls() > 0;
            if !piece.content.is_empty() {
                out.push(self.delta(index, Some(piece.content), None, None, None));
            }
            out.extend(self.call_chunks(index, piece.calls));
            if called && f.reason == FinishReason::Stop {
                reason = "tool_calls";
            }
        }
        out.push(self.delta(index, None, None, None, Some(reason)));
        out
    }

    fn usage(&mut self, u: Usage) -> String {
        let mut c = self.base.clone();
        c.choices = Vec::new();
        c.usage = Some(u);
        serde_json::to_string(&c).expect("usage chunk serialises")
    }
}

/// Answers a conversation, whole or streamed.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    operation_id = "create_chat_completion",
    tag = "openai",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The answer; with `stream: true`, `text/event-stream` `ChatChunk`s, then `data: [DONE]`", body = ChatResponse),
        GenerationErrors,
    )
)]
pub async fn handle(
    State(s): State<AppState>,
    Json(r): Json<ChatRequest>,
) -> Result<Response, ApiError> {
    s.check_open()?;
    let st = s.clone();
    let v = off_thread(move || {
        validation::chat(
            &r,
            &st.tokenizer,
            st.grammars.as_deref(),
            st.tool_parser,
            &st.limits,
            &st.model_name,
        )
    })
    .await?;
    let want_logprobs = v.requests.first().is_some_and(|r| r.logprobs.is_some());
    let streams = run::submit(&s.engine, v.requests.clone())?;
    let id = request_id("chatcmpl");
    let created = crate::http::unix_now();
    let version = s.engine.weights_version().to_string();
    if v.stream {
        let maker = Chunks {
            tok: s.tokenizer.clone(),
            base: ChatChunk {
                id,
                object: "chat.completion.chunk",
                created,
                model: s.model_name.to_string(),
                system_fingerprint: version,
                choices: Vec::new(),
                usage: None,
            },
            choices: streams.len(),
            want_logprobs,
            tools: match v.tool_format {
                Some(f) => (0..streams.len())
                    .map(|_| ToolStream::new(f, v.tool_names.clone()))
                    .collect(),
                None => Vec::new(),
            },
            parallel: v.tool_parallel,
        };
        let shutdown = s.deadline.subscribe();
        return Ok(run::sse(streams, maker, v.n, v.include_usage, shutdown).into_response());
    }
    let choices = run::collect(streams, s.deadline.subscribe()).await?;
    let finishes = run::finishes(&choices);
    run::log_summary(&finishes, v.n);
    let mut resp = ChatResponse {
        id,
        object: "chat.completion",
        created,
        model: s.model_name.to_string(),
        system_fingerprint: version,
        choices: Vec::new(),
        usage: run::usage(finishes.into_iter(), v.n),
        prompt_logprobs: v.prompt_logprobs.and_then(|k| {
            let first = choices.first()?;
            Some(run::prompt_logprobs(&s.tokenizer, &first.prompt, k))
        }),
    };
    for (index, c) in choices.into_iter().enumerate() {
        resp.system_fingerprint = c.finish.weights_version.clone();
        let mut reason = c.finish.reason.as_str();
        let (content, calls) = match v.tool_format {
            Some(f) => {
                let mut p = parse(f, &c.text, &v.tool_names);
                if !v.tool_parallel {
                    p.calls.truncate(1);
                }
                if !p.calls.is_empty() && c.finish.reason == FinishReason::Stop {
                    reason = "tool_calls";
                }
                let content = (!p.content.is_empty() || p.calls.is_empty()).then_some(p.content);
                (content, (!p.calls.is_empty()).then(|| tool_calls(p.calls)))
            }
            None => (Some(c.text), None),
        };
        resp.choices.push(ChatChoice {
            index,
            logprobs: want_logprobs.then(|| logprobs(&s.tokenizer, &c.tokens)),
            message: ChatMessageOut {
                role: "assistant",
                content,
                tool_calls: calls,
            },
            finish_reason: Some(reason),
        });
    }
    Ok(axum::Json(resp).into_response())
}
