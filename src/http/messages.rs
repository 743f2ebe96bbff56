//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API.
//! The request becomes a chat request (`validation::anthropic`) and runs like one; the
//! answer comes back as a message or as Anthropic's stream: `message_start`, per content
//! block `content_block_start` / `content_block_delta` (`text_delta`, `input_json_delta`) /
//! `content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`.
//! Every error on these routes, from any layer (a handler panic aside: that 500 keeps
//! OpenAI's shape), is rewritten into Anthropic's shape.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::openai::run::{self, EventMaker, object_id};
use crate::api::Usage;
use crate::api::anthropic::{
    AnthropicError, AnthropicErrorDetail, AnthropicUsage, CountTokensRequest, CountTokensResponse,
    MessagesRequest, MessagesResponse, OutBlock,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{AppState, off_thread};
use crate::tools::ToolStream;
use crate::tools::parse::{ParsedCall, parse};
use crate::validation::{self, anthropic as convert, responses::rename};
use sluice_engine::{Finish, FinishReason, PromptToken, TokenEvent};

/// Anthropic's error `type` for an HTTP status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

fn error_body(status: u16, message: String) -> AnthropicError {
    AnthropicError {
        kind: "error",
        error: AnthropicErrorDetail {
            kind: error_type(status).into(),
            message,
        },
    }
}

/// Rewrites any error response of the wrapped routes (validation, authentication, body
/// size, wrong method, engine) from OpenAI's shape into Anthropic's `{"type": "error", "error": {...}}`.
pub async fn errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    if status.is_success() {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            status
                .canonical_reason()
                .unwrap_or("request failed")
                .to_string()
        });
    let out = serde_json::to_vec(&error_body(status.as_u16(), message)).expect("errors serialise");
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(out))
}

/// Anthropic's stop reason for how generation ended.
fn stop_reason(f: &Finish, called: bool) -> &'static str {
    match (f.reason, called, &f.stop_string) {
        (FinishReason::Length, _, _) => "max_tokens",
        (FinishReason::Stop, true, _) => "tool_use",
        (FinishReason::Stop, false, Some(_)) => "stop_sequence",
        (FinishReason::Stop, false, None) => "end_turn",
    }
}

/// The stop sequence, only when it is what ended the answer.
fn stop_sequence(f: &Finish, reason: &str) -> Option<String> {
    (reason == "stop_sequence")
        .then(|| f.stop_string.clone())
        .flatten()
}

fn tool_use(c: ParsedCall) -> OutBlock {
    OutBlock::ToolUse {
        id: object_id("toolu"),
        name: c.name,
        input: serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({})),
    }
}

fn usage(u: Usage) -> AnthropicUsage {
    AnthropicUsage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
        ..AnthropicUsage::default()
    }
}

/// Anthropic's stream of one answer.
struct Events {
    message: MessagesResponse,
    tools: Option<ToolStream>,
    parallel: bool,
    /// Blocks started so far.
    blocks: usize,
    /// The index of the text block being written, if one is open.
    open: Option<usize>,
    called: bool,
    finish: Option<Finish>,
}

/// A named event: `type`, then the fields of `body`.
fn event(kind: &str, body: Value) -> SseEvent {
    let mut v = json!({ "type": kind });
    if let (Some(m), Value::Object(fields)) = (v.as_object_mut(), body) {
        m.extend(fields);
    }
    SseEvent::default().event(kind).data(v.to_string())
}

impl Events {
    fn text(&mut self, delta: String, out: &mut Vec<SseEvent>) {
        if delta.is_empty() {
            return;
        }
        let index = match self.open {
            Some(i) => i,
            None => {
                let i = self.blocks;
                self.blocks += 1;
                self.open = Some(i);
                out.push(event(
                    "content_block_start",
                    json!({"index": i, "content_block": {"type": "text", "text": ""}}),
                ));
                i
            }
        };
        out.push(event(
            "content_block_delta",
            json!({"index": index, "delta": {"type": "text_delta", "text": delta}}),
        ));
    }

    fn close_text(&mut self, out: &mut Vec<SseEvent>) {
        if let Some(i) = self.open.take() {
            out.push(event("content_block_stop", json!({ "index": i })));
        }
    }

    fn calls(&mut self, calls: Vec<(usize, ParsedCall)>, out: &mut Vec<SseEvent>) {
        for (i, c) in calls {
            if !self.parallel && i > 0 {
                continue;
            }
            self.close_text(out);
            self.called = true;
            let index = self.blocks;
            self.blocks += 1;
            let OutBlock::ToolUse { id, name, input } = tool_use(c) else {
                unreachable!("tool_use makes a tool_use block")
            };
            out.push(event(
                "content_block_start",
                json!({"index": index, "content_block":
                       {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            ));
            out.push(event(
                "content_block_delta",
                json!({"index": index, "delta":
                       {"type": "input_json_delta", "partial_json": input.to_string()}}),
            ));
            out.push(event("content_block_stop", json!({ "index": index })));
        }
    }
}

impl EventMaker for Events {
    fn start(&mut self) -> Vec<SseEvent> {
        let m = serde_json::to_value(&self.message).expect("messages serialise");
        vec![
            event("message_start", json!({ "message": m })),
            event("ping", json!({})),
        ]
    }

    fn prompt(&mut self, _: usize, _: &[PromptToken]) -> Vec<SseEvent> {
        Vec::new()
    }

    fn token(&mut self, _: usize, t: &TokenEvent) -> Vec<SseEvent> {
        let mut out = Vec::new();
        match self.tools.as_mut() {
            Some(s) => {
                let p = s.push(&t.text);
                self.text(p.content, &mut out);
                self.calls(p.calls, &mut out);
            }
            None => self.text(t.text.clone(), &mut out),
        }
        out
    }

    fn done(&mut self, _: usize, f: &Finish) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if let Some(p) = self.tools.as_mut().map(|s| s.finish()) {
            self.text(p.content, &mut out);
            self.calls(p.calls, &mut out);
        }
        self.close_text(&mut out);
        self.finish = Some(f.clone());
        out
    }

    fn end(&mut self, u: Usage) -> Vec<SseEvent> {
        let (reason, stop) = match &self.finish {
            Some(f) => {
                let reason = stop_reason(f, self.called);
                (reason, stop_sequence(f, reason))
            }
            None => ("end_turn", None),
        };
        vec![
            event(
                "message_delta",
                json!({"delta": {"stop_reason": reason, "stop_sequence": stop},
                       "usage": {"input_tokens": u.prompt_tokens,
                                 "output_tokens": u.completion_tokens}}),
            ),
            event("message_stop", json!({})),
        ]
    }

    fn error(&mut self, e: ApiError) -> Vec<SseEvent> {
        let body = error_body(e.status().as_u16(), e.to_string());
        vec![
            SseEvent::default()
                .event("error")
                .data(serde_json::to_string(&body).expect("errors serialise")),
        ]
    }
}

/// Answers a conversation in Anthropic's Messages shape, whole or streamed.
#[utoipa::path(
    post,
    path = "/v1/messages",
    operation_id = "create_message",
    tag = "anthropic",
    request_body = MessagesRequest,
    responses(
        (status = 200, description = "The answer; with `stream: true`, `text/event-stream` of named events (`message_start` … `message_stop`)", body = MessagesResponse),
        (status = "4XX", description = "Anthropic's error shape", body = AnthropicError),
        (status = "5XX", description = "Anthropic's error shape", body = AnthropicError),
    )
)]
pub async fn handle(
    State(s): State<AppState>,
    Json(r): Json<MessagesRequest>,
) -> Result<Response, ApiError> {
    s.check_open()?;
    let st = s.clone();
    let stream = r.stream;
    let v = off_thread(move || {
        let chat = convert::chat_request(&r)?;
        validation::chat(
            &chat,
            &st.tokenizer,
            st.grammars.as_deref(),
            st.tool_parser,
            &st.limits,
            &st.model_name,
        )
        .map_err(|e| rename(e, convert::NAMES))
    })
    .await?;
    let input_tokens = v.requests.first().map_or(0, |q| q.prompt.len());
    let streams = run::submit(&s.engine, v.requests.clone())?;
    let mut message = MessagesResponse {
        id: object_id("msg"),
        kind: "message",
        role: "assistant",
        model: s.model_name.to_string(),
        content: Vec::new(),
        stop_reason: None,
        stop_sequence: None,
        usage: AnthropicUsage {
            input_tokens,
            ..AnthropicUsage::default()
        },
    };
    if stream {
        let maker = Events {
            message,
            tools: v
                .tool_format
                .map(|f| ToolStream::new(f, v.tool_names.clone())),
            parallel: v.tool_parallel,
            blocks: 0,
            open: None,
            called: false,
            finish: None,
        };
        return Ok(run::events(streams, maker, 1, s.deadline.subscribe()).into_response());
    }
    let choices = run::collect(streams, s.deadline.subscribe()).await?;
    let finishes = run::finishes(&choices);
    run::log_summary(&finishes, 1);
    let c = choices.into_iter().next().expect("one choice per message");
    let (content, calls) = match v.tool_format {
        Some(f) => {
            let mut p = parse(f, &c.text, &v.tool_names);
            if !v.tool_parallel {
                p.calls.truncate(1);
            }
            (p.content, p.calls)
        }
        None => (c.text, Vec::new()),
    };
    if !content.is_empty() {
        message.content.push(OutBlock::Text { text: content });
    }
    let reason = stop_reason(&c.finish, !calls.is_empty());
    message.stop_reason = Some(reason);
    message.stop_sequence = stop_sequence(&c.finish, reason);
    message.content.extend(calls.into_iter().map(tool_use));
    message.usage = usage(run::usage(finishes.into_iter(), 1));
    Ok(axum::Json(message).into_response())
}

/// Counts the tokens of a conversation's prompt as this server renders it.
#[utoipa::path(
    post,
    path = "/v1/messages/count_tokens",
    operation_id = "count_message_tokens",
    tag = "anthropic",
    request_body = CountTokensRequest,
    responses(
        (status = 200, description = "The prompt's token count", body = CountTokensResponse),
        (status = "4XX", description = "Anthropic's error shape", body = AnthropicError),
    )
)]
pub async fn count_tokens(
    State(s): State<AppState>,
    Json(r): Json<CountTokensRequest>,
) -> Result<Response, ApiError> {
    let st = s.clone();
    let n = off_thread(move || {
        let chat = convert::count_request(&r)?;
        validation::prompt_tokens(
            &chat,
            &st.tokenizer,
            st.grammars.as_deref(),
            st.tool_parser,
            &st.model_name,
        )
    })
    .await?;
    Ok(axum::Json(CountTokensResponse { input_tokens: n }).into_response())
}
