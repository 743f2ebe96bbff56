//! `POST /v1/responses`: OpenAI's Responses API, stateless. The request becomes a chat
//! request (`validation::responses`), runs like one, and is answered as a response object
//! or as the Responses stream: `response.created`, `response.in_progress`, per output item
//! `response.output_item.added` … `response.output_item.done` (text through
//! `response.content_part.*` and `response.output_text.*`, calls through
//! `response.function_call_arguments.*`), then `response.completed` or
//! `response.incomplete`. Every event carries its `sequence_number`. A stream that fails
//! sends `error`, then `response.failed`.

use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::generate::{Api, Choice, EventMaker, named_event, object_id, route, validate_chat};
use crate::api::Usage;
use crate::api::responses::{
    IncompleteDetails, OutputItem, OutputText, ReasoningText, ResponseObject, ResponsesRequest,
    ResponsesUsage, TextConfig,
};
use crate::error::ApiError;
use crate::http::AppState;
use crate::tools::stream::{CallDelta, Piece};
use crate::validation::{Validated, ValidationError, responses as convert};
use sluice_engine::{Finish, FinishReason, TokenEvent};

/// The response object as first announced (`in_progress`, no output yet), echoing the
/// request's settings.
fn base(r: &ResponsesRequest, model: &str) -> ResponseObject {
    ResponseObject {
        id: object_id("resp"),
        object: "response",
        created_at: crate::http::unix_now(),
        status: "in_progress",
        model: model.to_string(),
        output: Vec::new(),
        incomplete_details: None,
        error: None,
        instructions: r.instructions.clone(),
        max_output_tokens: r.max_output_tokens,
        temperature: r.temperature.unwrap_or(1.0),
        top_p: r.top_p.unwrap_or(1.0),
        parallel_tool_calls: r.parallel_tool_calls.unwrap_or(true),
        tool_choice: r.tool_choice.clone().unwrap_or_else(|| json!("auto")),
        tools: r.tools.clone().unwrap_or_default(),
        text: r.text.clone().unwrap_or(TextConfig {
            format: Some(crate::api::responses::TextFormat {
                kind: "text".into(),
                name: None,
                schema: None,
                description: None,
                strict: None,
            }),
        }),
        store: false,
        previous_response_id: None,
        metadata: r.metadata.clone().unwrap_or_else(|| json!({})),
        usage: None,
    }
}

fn usage(u: Usage) -> ResponsesUsage {
    ResponsesUsage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
        total_tokens: u.total_tokens,
        output_tokens_details: crate::api::responses::OutputTokensDetails {
            reasoning_tokens: u
                .completion_tokens_details
                .map_or(0, |d| d.reasoning_tokens),
        },
        ..ResponsesUsage::default()
    }
}

/// `completed`, or `incomplete` with the reason, from how generation ended.
fn status(f: &Finish) -> (&'static str, Option<IncompleteDetails>) {
    match f.reason {
        FinishReason::Stop => ("completed", None),
        FinishReason::Length => (
            "incomplete",
            Some(IncompleteDetails {
                reason: "max_output_tokens",
            }),
        ),
    }
}

fn message(id: String, status: &'static str, text: Option<String>) -> OutputItem {
    OutputItem::Message {
        id,
        status,
        role: "assistant",
        content: text.map(part).into_iter().collect(),
    }
}

/// A reasoning item; `text` once it is known.
fn reasoning(id: String, status: &'static str, text: Option<String>) -> OutputItem {
    OutputItem::Reasoning {
        id,
        summary: Vec::new(),
        content: text
            .map(|text| ReasoningText {
                kind: "reasoning_text",
                text,
            })
            .into_iter()
            .collect(),
        status,
    }
}

fn part(text: String) -> OutputText {
    OutputText {
        kind: "output_text",
        text,
        annotations: Vec::new(),
    }
}

fn function_call(name: String, arguments: String, status: &'static str) -> OutputItem {
    OutputItem::FunctionCall {
        id: object_id("fc"),
        call_id: object_id("call"),
        name,
        arguments,
        status,
    }
}

/// The Responses stream of one answer.
struct Events {
    resp: ResponseObject,
    seq: u64,
    /// The request has active tools, or the model thinks: no message item is opened
    /// before text comes.
    tools: bool,
    /// The reasoning item being written: its output index, id and text so far.
    thinking: Option<(usize, String, String)>,
    /// The function call item being written: its output index and id.
    calling: Option<(usize, String)>,
    /// The message item being written: its output index, id and text so far.
    open: Option<(usize, String, String)>,
    finish: Option<Finish>,
}

impl Events {
    /// A named event: `type` and `sequence_number`, then the fields of `body`.
    fn event(&mut self, kind: &str, body: Value) -> SseEvent {
        let head = json!({"type": kind, "sequence_number": self.seq});
        self.seq += 1;
        named_event(kind, head, body)
    }

    fn lifecycle(&mut self, kind: &str) -> SseEvent {
        let r = serde_json::to_value(&self.resp).expect("responses serialise");
        self.event(kind, json!({ "response": r }))
    }

    /// Opens a message item if none is open.
    fn open_message(&mut self, out: &mut Vec<SseEvent>) {
        if self.open.is_some() {
            return;
        }
        let index = self.resp.output.len();
        let id = object_id("msg");
        let item = serde_json::to_value(message(id.clone(), "in_progress", None))
            .expect("items serialise");
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        let p = serde_json::to_value(part(String::new())).expect("parts serialise");
        out.push(self.event(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": p}),
        ));
        // Reserve the index: later items come after it.
        self.resp
            .output
            .push(message(id.clone(), "in_progress", None));
        self.open = Some((index, id, String::new()));
    }

    fn text(&mut self, delta: String, out: &mut Vec<SseEvent>) {
        if delta.is_empty() {
            return;
        }
        self.open_message(out);
        let (index, id) = {
            let (i, id, text) = self.open.as_mut().expect("a message is open");
            text.push_str(&delta);
            (*i, id.clone())
        };
        out.push(self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta,
                   "logprobs": []}),
        ));
    }

    /// Closes the open message item (`status`: `completed` or `incomplete`).
    fn close_message(&mut self, status: &'static str, out: &mut Vec<SseEvent>) {
        let Some((index, id, text)) = self.open.take() else {
            return;
        };
        out.push(self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text,
                   "logprobs": []}),
        ));
        let p = serde_json::to_value(part(text.clone())).expect("parts serialise");
        out.push(self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": p}),
        ));
        let item = message(id, status, Some(text));
        let v = serde_json::to_value(&item).expect("items serialise");
        self.resp.output[index] = item;
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": v}),
        ));
    }

    /// Thinking text, into the reasoning item (opened first if need be).
    fn thought(&mut self, delta: String, out: &mut Vec<SseEvent>) {
        if delta.is_empty() {
            return;
        }
        if self.thinking.is_none() {
            let index = self.resp.output.len();
            let id = object_id("rs");
            let item = reasoning(id.clone(), "in_progress", None);
            let v = serde_json::to_value(&item).expect("items serialise");
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": v}),
            ));
            self.resp.output.push(item);
            self.thinking = Some((index, id, String::new()));
        }
        let (index, id) = {
            let (i, id, text) = self.thinking.as_mut().expect("a reasoning item is open");
            text.push_str(&delta);
            (*i, id.clone())
        };
        out.push(self.event(
            "response.reasoning_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta}),
        ));
    }

    /// Closes the reasoning item, if one is open.
    fn close_thinking(&mut self, status: &'static str, out: &mut Vec<SseEvent>) {
        let Some((index, id, text)) = self.thinking.take() else {
            return;
        };
        out.push(self.event(
            "response.reasoning_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
        ));
        let item = reasoning(id, status, Some(text));
        let v = serde_json::to_value(&item).expect("items serialise");
        self.resp.output[index] = item;
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": v}),
        ));
    }

    /// Thinking, text and calls of the answer, as items.
    fn piece(&mut self, p: Piece, out: &mut Vec<SseEvent>) {
        self.thought(p.reasoning, out);
        if !p.content.is_empty() || !p.calls.is_empty() {
            self.close_thinking("completed", out);
        }
        if !p.content.is_empty() {
            self.close_call(out);
        }
        self.text(p.content, out);
        for d in p.calls {
            self.call(d, out);
        }
    }

    /// A piece of a call: its item opened at its start, its arguments as deltas, its
    /// item closed when it is complete.
    fn call(&mut self, d: CallDelta, out: &mut Vec<SseEvent>) {
        if let Some(name) = d.name {
            self.close_message("completed", out);
            self.close_call(out);
            let index = self.resp.output.len();
            let item = function_call(name, String::new(), "in_progress");
            let OutputItem::FunctionCall { id, .. } = &item else {
                unreachable!("function_call makes a function call item")
            };
            let v = serde_json::to_value(&item).expect("items serialise");
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": v}),
            ));
            self.calling = Some((index, id.clone()));
            self.resp.output.push(item);
        }
        if let Some((index, id)) = self.calling.clone()
            && !d.arguments.is_empty()
        {
            if let Some(OutputItem::FunctionCall { arguments, .. }) =
                self.resp.output.get_mut(index)
            {
                arguments.push_str(&d.arguments);
            }
            out.push(self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": d.arguments}),
            ));
        }
        if d.done {
            self.close_call(out);
        }
    }

    /// Closes the function call item being written, if any.
    fn close_call(&mut self, out: &mut Vec<SseEvent>) {
        let Some((index, id)) = self.calling.take() else {
            return;
        };
        let Some(OutputItem::FunctionCall {
            name,
            arguments,
            status,
            ..
        }) = self.resp.output.get_mut(index)
        else {
            return;
        };
        *status = "completed";
        let (name, arguments) = (name.clone(), arguments.clone());
        out.push(self.event(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments}),
        ));
        let v = serde_json::to_value(&self.resp.output[index]).expect("items serialise");
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": v}),
        ));
    }
}

impl EventMaker for Events {
    fn start(&mut self) -> Vec<SseEvent> {
        let mut out = vec![
            self.lifecycle("response.created"),
            self.lifecycle("response.in_progress"),
        ];
        if !self.tools {
            self.open_message(&mut out);
        }
        out
    }

    fn token(&mut self, _: usize, _: &TokenEvent, piece: Piece) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.piece(piece, &mut out);
        out
    }

    fn done(&mut self, _: usize, f: &Finish, rest: Piece, _: bool) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.piece(rest, &mut out);
        self.close_call(&mut out);
        self.close_thinking(status(f).0, &mut out);
        if self
            .resp
            .output
            .iter()
            .all(|o| matches!(o, OutputItem::Reasoning { .. }))
        {
            self.open_message(&mut out);
        }
        self.close_message(status(f).0, &mut out);
        self.finish = Some(f.clone());
        out
    }

    fn end(&mut self, u: Usage) -> Vec<SseEvent> {
        let (status, details) = match &self.finish {
            Some(f) => status(f),
            None => ("completed", None),
        };
        self.resp.status = status;
        self.resp.incomplete_details = details;
        self.resp.usage = Some(usage(u));
        let kind = match status {
            "completed" => "response.completed",
            _ => "response.incomplete",
        };
        vec![self.lifecycle(kind)]
    }

    /// An `error` event, then `response.failed` with the output so far.
    fn error(&mut self, e: ApiError) -> Vec<SseEvent> {
        let body = e.body();
        let err = &body["error"];
        let first = self.event(
            "error",
            json!({"code": err["code"], "message": err["message"], "param": err["param"]}),
        );
        self.resp.status = "failed";
        self.resp.error = Some(json!({"code": err["code"], "message": err["message"]}));
        vec![first, self.lifecycle("response.failed")]
    }
}

/// A response as it starts: the object first announced.
struct Responses(ResponseObject);

impl Api for Responses {
    type Request = ResponsesRequest;
    type Events = Events;

    fn model(r: &ResponsesRequest) -> Option<&str> {
        r.model.as_deref()
    }

    fn validate(r: &ResponsesRequest, s: &AppState) -> Result<Validated, ValidationError> {
        validate_chat(&convert::chat_request(r)?, &convert::FIELDS, s)
    }

    fn start(r: ResponsesRequest, _: &Validated, s: &AppState) -> Self {
        Responses(base(&r, &s.model_name))
    }

    fn events(self, v: &Validated, _: &AppState) -> Events {
        Events {
            resp: self.0,
            seq: 0,
            tools: v.tools.is_some() || v.reasoning.is_some(),
            thinking: None,
            calling: None,
            open: None,
            finish: None,
        }
    }

    fn answer(self, _: &Validated, choices: Vec<Choice>, u: Usage, _: &AppState) -> Response {
        let mut resp = self.0;
        let c = choices.into_iter().next().expect("one choice per response");
        let (status, details) = status(&c.finish);
        if !c.reasoning.is_empty() {
            let done = if c.text.is_empty() && c.calls.is_empty() {
                status
            } else {
                "completed"
            };
            let item = reasoning(object_id("rs"), done, Some(c.reasoning));
            resp.output.push(item);
        }
        if !c.text.is_empty() || c.calls.is_empty() {
            let text = Some(c.text);
            resp.output.push(message(object_id("msg"), status, text));
        }
        let calls = c
            .calls
            .into_iter()
            .map(|c| function_call(c.name, c.arguments, "completed"));
        resp.output.extend(calls);
        resp.status = status;
        resp.incomplete_details = details;
        resp.usage = Some(usage(u));
        axum::Json(resp).into_response()
    }
}

route! {
    /// Answers a conversation in the Responses API's shape, whole or streamed.
    Responses: post "/v1/responses", operation_id "create_response", tag "openai",
    ResponsesRequest => ResponseObject: "The response; with `stream: true`, `text/event-stream` of named events (`response.created` … `response.completed`)",
    crate::api::GenerationErrors
}
