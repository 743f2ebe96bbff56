//! `POST /v1/responses` as a chat request: the input items become chat messages (function
//! calls and their outputs the chat API's tool history), `text.format` the
//! `response_format`, flat function tools the chat API's `tools`. Every field is then
//! checked by the chat validation, told the Responses names of the fields (`FIELDS`).

use crate::api::responses::{InputContent, ResponsesInput, ResponsesRequest, TextFormat};
use crate::api::structured::{JsonSchemaFormat, ResponseFormat};
use crate::api::tools::{FunctionCall, FunctionDef, NamedFunction, NamedToolChoice, Tool};
use crate::api::tools::{ToolCall, ToolChoice};
use crate::api::{ChatRequest, CommonParams, MessageContent, WireMessage};

use super::{Fields, ValidationError};

/// A plain text message.
pub fn text_message(role: &str, text: String) -> WireMessage {
    WireMessage {
        role: role.to_string(),
        content: Some(MessageContent::Text(text)),
        tool_calls: None,
        tool_call_id: None,
        name: None,
    }
}

/// Adds a call to the assistant message that ends `msgs` (the text and the calls of one
/// turn are one message), or to a new one.
pub fn push_call(msgs: &mut Vec<WireMessage>, call: ToolCall) {
    match msgs.last_mut() {
        Some(m) if m.role == "assistant" => m.tool_calls.get_or_insert_with(Vec::new).push(call),
        _ => msgs.push(WireMessage {
            role: "assistant".into(),
            content: None,
            tool_calls: Some(vec![call]),
            tool_call_id: None,
            name: None,
        }),
    }
}

/// Adds system text: joined to a system message that ends `msgs` (`instructions`
/// followed by a `developer` item is one system prompt, as chat templates expect), else
/// a new message.
fn push_system(msgs: &mut Vec<WireMessage>, text: String) {
    if let Some(WireMessage {
        role,
        content: Some(MessageContent::Text(t)),
        ..
    }) = msgs.last_mut()
        && role == "system"
    {
        t.push_str("\n\n");
        t.push_str(&text);
        return;
    }
    msgs.push(text_message("system", text));
}

/// The text of a function call's output: a string as is, text parts joined, other JSON
/// as JSON.
fn output_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) if parts.iter().all(|p| p["text"].is_string()) => {
            parts.iter().filter_map(|p| p["text"].as_str()).collect()
        }
        other => other.to_string(),
    }
}

fn invalid(param: &'static str, message: String) -> ValidationError {
    ValidationError::invalid(param, message)
}

/// The conversation of `input` (after `instructions`) as chat messages.
fn input_messages(r: &ResponsesRequest) -> Result<Vec<WireMessage>, ValidationError> {
    let mut msgs = Vec::new();
    if let Some(i) = &r.instructions {
        msgs.push(text_message("system", i.clone()));
    }
    let items = match &r.input {
        ResponsesInput::Text(t) => {
            msgs.push(text_message("user", t.clone()));
            return Ok(msgs);
        }
        ResponsesInput::Items(items) => items,
    };
    for (i, it) in items.iter().enumerate() {
        match it.kind.as_deref().unwrap_or("message") {
            "message" => {
                let role = match it.role.as_deref() {
                    Some(r @ ("user" | "assistant" | "system")) => r,
                    Some("developer") => "system",
                    other => {
                        return Err(invalid(
                            "input",
                            format!(
                                "input[{i}].role must be user, assistant, system or developer, \
                                 got {other:?}"
                            ),
                        ));
                    }
                };
                let text = match &it.content {
                    None => String::new(),
                    Some(InputContent::Text(t)) => t.clone(),
                    Some(InputContent::Parts(parts)) => {
                        let mut s = String::new();
                        for p in parts {
                            match (p.kind.as_str(), &p.text) {
                                ("input_text" | "output_text" | "text", Some(t)) => s.push_str(t),
                                (k, _) => {
                                    return Err(invalid(
                                        "input",
                                        format!(
                                            "input[{i}]: content parts of type `{k}` are not \
                                             supported; only input_text and output_text"
                                        ),
                                    ));
                                }
                            }
                        }
                        s
                    }
                };
                if role == "system" {
                    push_system(&mut msgs, text);
                } else {
                    msgs.push(text_message(role, text));
                }
            }
            "function_call" => {
                let (Some(call_id), Some(name)) = (&it.call_id, &it.name) else {
                    return Err(invalid(
                        "input",
                        format!("input[{i}]: a function_call needs `call_id` and `name`"),
                    ));
                };
                push_call(
                    &mut msgs,
                    ToolCall {
                        id: call_id.clone(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: name.clone(),
                            arguments: it.arguments.clone().unwrap_or_else(|| "{}".into()),
                        },
                    },
                );
            }
            "function_call_output" => {
                let Some(call_id) = &it.call_id else {
                    return Err(invalid(
                        "input",
                        format!("input[{i}]: a function_call_output needs `call_id`"),
                    ));
                };
                let mut m = text_message(
                    "tool",
                    it.output.as_ref().map(output_text).unwrap_or_default(),
                );
                m.tool_call_id = Some(call_id.clone());
                msgs.push(m);
            }
            // An earlier answer's thinking: not part of the prompt (as chat templates
            // drop earlier turns' thinking).
            "reasoning" => {}
            other => {
                return Err(invalid(
                    "input",
                    format!(
                        "input[{i}]: items of type `{other}` are not supported; use message, \
                         function_call, function_call_output or reasoning"
                    ),
                ));
            }
        }
    }
    Ok(msgs)
}

/// `text.format` as a chat `response_format`.
fn format(f: &TextFormat) -> Result<Option<ResponseFormat>, ValidationError> {
    Ok(match f.kind.as_str() {
        "text" => None,
        "json_object" => Some(ResponseFormat::JsonObject),
        "json_schema" => Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: f.name.clone(),
                description: f.description.clone(),
                schema: f.schema.clone(),
                strict: f.strict,
            },
        }),
        other => {
            return Err(invalid(
                "text",
                format!("text.format.type must be text, json_object or json_schema, got `{other}`"),
            ));
        }
    })
}

/// `tool_choice` in the Responses shape as the chat one.
fn tool_choice(v: &serde_json::Value) -> Result<ToolChoice, ValidationError> {
    match v {
        serde_json::Value::String(mode) => Ok(ToolChoice::Mode(mode.clone())),
        serde_json::Value::Object(o)
            if o.get("type").and_then(|t| t.as_str()) == Some("function") =>
        {
            match o.get("name").and_then(|n| n.as_str()) {
                Some(name) => Ok(ToolChoice::Named(NamedToolChoice {
                    kind: "function".into(),
                    function: NamedFunction { name: name.into() },
                })),
                None => Err(invalid(
                    "tool_choice",
                    "a function tool_choice needs `name`".into(),
                )),
            }
        }
        _ => Err(invalid(
            "tool_choice",
            "tool_choice must be none, auto, required or {\"type\": \"function\", \"name\": ...}"
                .into(),
        )),
    }
}

/// The chat request a Responses request asks for.
pub fn chat_request(r: &ResponsesRequest) -> Result<ChatRequest, ValidationError> {
    if r.store == Some(true) {
        return Err(invalid(
            "store",
            "this server stores no responses: `store` must be false or absent; send the whole \
             conversation as `input`"
                .into(),
        ));
    }
    if r.previous_response_id.is_some() {
        return Err(invalid(
            "previous_response_id",
            "this server stores no responses, so `previous_response_id` cannot be followed; \
             send the earlier turns as `input` items"
                .into(),
        ));
    }
    let mut tools = Vec::new();
    for (i, t) in r.tools.iter().flatten().enumerate() {
        let (true, Some(name)) = (t.kind == "function", &t.name) else {
            return Err(invalid(
                "tools",
                format!(
                    "tools[{i}]: only `function` tools with a `name` are served (got type `{}`)",
                    t.kind
                ),
            ));
        };
        tools.push(Tool {
            kind: "function".into(),
            function: FunctionDef {
                name: name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
                strict: t.strict,
            },
        });
    }
    let response_format = match r.text.as_ref().and_then(|t| t.format.as_ref()) {
        Some(f) => format(f)?,
        None => None,
    };
    Ok(ChatRequest {
        messages: input_messages(r)?,
        max_completion_tokens: None,
        logprobs: false,
        top_logprobs: None,
        tools: (!tools.is_empty()).then_some(tools),
        tool_choice: r.tool_choice.as_ref().map(tool_choice).transpose()?,
        chat_template_kwargs: None,
        reasoning_effort: r.reasoning.as_ref().and_then(|x| x.effort.clone()),
        thinking_token_budget: None,
        parallel_tool_calls: r.parallel_tool_calls,
        common: CommonParams {
            model: r.model.clone(),
            max_tokens: r.max_output_tokens,
            temperature: r.temperature,
            top_p: r.top_p,
            seed: r.seed,
            stream: r.stream,
            response_format,
            user: r.user.clone(),
            ..CommonParams::default()
        },
    })
}

/// The Responses names of the chat fields it spells its own way.
pub const FIELDS: Fields = Fields {
    messages: "input",
    max_tokens: "max_output_tokens",
    stop: "stop",
    response_format: "text",
};
