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

use super::generate::{Api, Choice, EventMaker, named_event, object_id, route, validate_chat};
use crate::api::Usage;
use crate::api::anthropic::{
    AnthropicError, AnthropicErrorDetail, AnthropicUsage, CountTokensRequest, CountTokensResponse,
    MessagesRequest, MessagesResponse, OutBlock,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{AppState, ServerState, off_thread};
use crate::tools::parse::ParsedCall;
use crate::tools::stream::{CallDelta, Piece};
use crate::validation::{self, Validated, ValidationError, anthropic as convert};
use sluice_engine::{Finish, FinishReason, TokenEvent};

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
        408 | 504 => "timeout_error",
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

/// Whether `path` is one of Anthropic's routes (whose errors take Anthropic's shape).
pub fn is_messages_route(path: &str) -> bool {
    path == "/v1/messages" || path.starts_with("/v1/messages/")
}

/// An error response in Anthropic's shape, for errors raised outside the routes (a body
/// that did not arrive in time).
pub fn error_response(status: axum::http::StatusCode, message: String) -> Response {
    let body = serde_json::to_vec(&error_body(status.as_u16(), message)).expect("errors serialise");
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
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
    /// Blocks started so far.
    blocks: usize,
    /// The index and kind (`text` or `thinking`) of the block being written, if one is
    /// open.
    open: Option<(usize, &'static str)>,
    /// How the answer ended, and whether it called a tool.
    finish: Option<(Finish, bool)>,
}

/// A named event: `type`, then the fields of `body`.
fn event(kind: &str, body: Value) -> SseEvent {
    named_event(kind, json!({ "type": kind }), body)
}

impl Events {
    /// Text of a `text` or `thinking` block, opened first (the other kind closed) if
    /// need be.
    fn text(&mut self, kind: &'static str, delta: String, out: &mut Vec<SseEvent>) {
        if delta.is_empty() {
            return;
        }
        if self.open.is_some_and(|(_, k)| k != kind) {
            self.close_text(out);
        }
        let index = match self.open {
            Some((i, _)) => i,
            None => {
                let i = self.blocks;
                self.blocks += 1;
                self.open = Some((i, kind));
                let block = match kind {
                    "thinking" => json!({"type": "thinking", "thinking": "", "signature": ""}),
                    _ => json!({"type": "text", "text": ""}),
                };
                out.push(event(
                    "content_block_start",
                    json!({"index": i, "content_block": block}),
                ));
                i
            }
        };
        let delta = match kind {
            "thinking" => json!({"type": "thinking_delta", "thinking": delta}),
            _ => json!({"type": "text_delta", "text": delta}),
        };
        out.push(event(
            "content_block_delta",
            json!({"index": index, "delta": delta}),
        ));
    }

    /// Closes the open block; a thinking block gets its (empty) signature first.
    fn close_text(&mut self, out: &mut Vec<SseEvent>) {
        if let Some((i, kind)) = self.open.take() {
            if kind == "thinking" {
                out.push(event(
                    "content_block_delta",
                    json!({"index": i, "delta": {"type": "signature_delta", "signature": ""}}),
                ));
            }
            out.push(event("content_block_stop", json!({ "index": i })));
        }
    }

    /// Thinking, text and calls of the answer, as blocks.
    fn piece(&mut self, p: Piece, out: &mut Vec<SseEvent>) {
        self.text("thinking", p.reasoning, out);
        self.text("text", p.content, out);
        self.calls(p.calls, out);
    }

    /// Pieces of calls: a `tool_use` block opened at a call's start, its input as JSON
    /// deltas, closed when the call is complete.
    fn calls(&mut self, calls: Vec<CallDelta>, out: &mut Vec<SseEvent>) {
        for d in calls {
            if let Some(name) = d.name {
                self.close_text(out);
                let index = self.blocks;
                self.blocks += 1;
                out.push(event(
                    "content_block_start",
                    json!({"index": index, "content_block":
                           {"type": "tool_use", "id": object_id("toolu"), "name": name,
                            "input": {}}}),
                ));
                self.open = Some((index, "tool_use"));
            }
            let Some((index, "tool_use")) = self.open else {
                continue;
            };
            if !d.arguments.is_empty() {
                out.push(event(
                    "content_block_delta",
                    json!({"index": index, "delta":
                           {"type": "input_json_delta", "partial_json": d.arguments}}),
                ));
            }
            if d.done {
                self.close_text(out);
            }
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

    fn token(&mut self, _: usize, _: &TokenEvent, piece: Piece) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.piece(piece, &mut out);
        out
    }

    fn done(&mut self, _: usize, f: &Finish, rest: Piece, called: bool) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.piece(rest, &mut out);
        self.close_text(&mut out);
        self.finish = Some((f.clone(), called));
        out
    }

    fn end(&mut self, u: Usage) -> Vec<SseEvent> {
        let (reason, stop) = match &self.finish {
            Some((f, called)) => {
                let reason = stop_reason(f, *called);
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

/// A message as it starts: its id, and the prompt's tokens as its usage.
struct Message(MessagesResponse);

impl Api for Message {
    type Request = MessagesRequest;
    type Events = Events;

    fn model(r: &MessagesRequest) -> Option<&str> {
        r.model.as_deref()
    }

    fn validate(r: &MessagesRequest, s: &AppState) -> Result<Validated, ValidationError> {
        validate_chat(&convert::chat_request(r)?, &convert::FIELDS, s)
    }

    fn start(_: MessagesRequest, v: &Validated, s: &AppState) -> Self {
        Message(MessagesResponse {
            id: object_id("msg"),
            kind: "message",
            role: "assistant",
            model: s.model_name.to_string(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: AnthropicUsage {
                input_tokens: v.requests.first().map_or(0, |q| q.prompt.len()),
                ..AnthropicUsage::default()
            },
        })
    }

    fn events(self, _: &Validated, _: &AppState) -> Events {
        Events {
            message: self.0,
            blocks: 0,
            open: None,
            finish: None,
        }
    }

    fn answer(self, _: &Validated, choices: Vec<Choice>, u: Usage, _: &AppState) -> Response {
        let mut message = self.0;
        let c = choices.into_iter().next().expect("one choice per message");
        if !c.reasoning.is_empty() {
            message.content.push(OutBlock::Thinking {
                thinking: c.reasoning,
                signature: String::new(),
            });
        }
        if !c.text.is_empty() {
            message.content.push(OutBlock::Text { text: c.text });
        }
        let reason = stop_reason(&c.finish, !c.calls.is_empty());
        message.stop_reason = Some(reason);
        message.stop_sequence = stop_sequence(&c.finish, reason);
        message.content.extend(c.calls.into_iter().map(tool_use));
        message.usage = usage(u);
        axum::Json(message).into_response()
    }
}

route! {
    /// Answers a conversation in Anthropic's Messages shape, whole or streamed.
    Message: post "/v1/messages", operation_id "create_message", tag "anthropic",
    MessagesRequest => MessagesResponse: "The answer; with `stream: true`, `text/event-stream` of named events (`message_start` … `message_stop`)",
    (status = "4XX", description = "Anthropic's error shape", body = AnthropicError),
    (status = "5XX", description = "Anthropic's error shape", body = AnthropicError),
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
    State(server): State<ServerState>,
    Json(r): Json<CountTokensRequest>,
) -> Result<Response, ApiError> {
    let st = server.model(r.model.as_deref()).await?;
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
