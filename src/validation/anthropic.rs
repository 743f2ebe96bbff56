//! `POST /v1/messages` as a chat request: `system` becomes the first message, `tool_use`
//! and `tool_result` blocks the chat API's tool history, `stop_sequences` its `stop`,
//! `tool_choice` `any` its `required`. The chat validation then checks every field.

use crate::api::anthropic::{
    AnthropicTool, AnthropicToolChoice, InBlock, InContent, InMessage, MessagesRequest,
    SystemPrompt,
};
use crate::api::structured::{JsonSchemaFormat, ResponseFormat};
use crate::api::tools::{FunctionCall, FunctionDef, NamedFunction, NamedToolChoice, Tool};
use crate::api::tools::{ToolCall, ToolChoice};
use crate::api::{ChatRequest, CommonParams, StopInput, WireMessage};

use super::responses::{push_call, text_message};
use super::{Fields, ValidationError};

fn invalid(param: &'static str, message: String) -> ValidationError {
    ValidationError::invalid(param, message)
}

/// The text of text blocks (or a string).
fn block_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

fn system_text(s: &SystemPrompt) -> Result<String, ValidationError> {
    match s {
        SystemPrompt::Text(t) => Ok(t.clone()),
        SystemPrompt::Blocks(blocks) => {
            let mut out = Vec::new();
            for b in blocks {
                match (b.kind.as_str(), &b.text) {
                    ("text", Some(t)) => out.push(t.as_str()),
                    (k, _) => {
                        return Err(invalid(
                            "system",
                            format!("system blocks must be text, got `{k}`"),
                        ));
                    }
                }
            }
            Ok(out.join("\n"))
        }
    }
}

/// One request message as chat messages (tool results become `tool` messages).
fn push_message(
    i: usize,
    m: &InMessage,
    msgs: &mut Vec<WireMessage>,
) -> Result<(), ValidationError> {
    if m.role != "user" && m.role != "assistant" {
        return Err(invalid(
            "messages",
            format!(
                "messages[{i}].role must be user or assistant, got `{}`",
                m.role
            ),
        ));
    }
    let blocks: &[InBlock] = match &m.content {
        InContent::Text(t) => {
            msgs.push(text_message(&m.role, t.clone()));
            return Ok(());
        }
        InContent::Blocks(b) => b,
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for b in blocks {
        match (b.kind.as_str(), m.role.as_str()) {
            ("text", _) => text.push_str(b.text.as_deref().unwrap_or("")),
            // An earlier answer's reasoning, from another server: not part of the prompt.
            ("thinking" | "redacted_thinking", "assistant") => {}
            ("tool_use", "assistant") => {
                let (Some(id), Some(name)) = (&b.id, &b.name) else {
                    return Err(invalid(
                        "messages",
                        format!("messages[{i}]: a tool_use block needs `id` and `name`"),
                    ));
                };
                let input = b.input.clone().unwrap_or_else(|| serde_json::json!({}));
                calls.push(ToolCall {
                    id: id.clone(),
                    kind: "function".into(),
                    function: FunctionCall {
                        name: name.clone(),
                        arguments: input.to_string(),
                    },
                });
            }
            ("tool_result", "user") => {
                let Some(id) = &b.tool_use_id else {
                    return Err(invalid(
                        "messages",
                        format!("messages[{i}]: a tool_result block needs `tool_use_id`"),
                    ));
                };
                let mut content = b.content.as_ref().map(block_text).unwrap_or_default();
                if b.is_error == Some(true) {
                    content = format!("Error: {content}");
                }
                let mut t = text_message("tool", content);
                t.tool_call_id = Some(id.clone());
                msgs.push(t);
            }
            (k, role) => {
                return Err(invalid(
                    "messages",
                    format!(
                        "messages[{i}]: `{k}` blocks are not supported in {role} messages; \
                         text, tool_use (assistant) and tool_result (user) are"
                    ),
                ));
            }
        }
    }
    if m.role == "assistant" {
        let mut msg = text_message("assistant", text);
        if !calls.is_empty() {
            msg.tool_calls = Some(Vec::new());
        }
        msgs.push(msg);
        for c in calls {
            push_call(msgs, c);
        }
    } else if !text.is_empty() || !blocks.iter().any(|b| b.kind == "tool_result") {
        msgs.push(text_message("user", text));
    }
    Ok(())
}

/// The chat API's `tools`, `tool_choice` and `parallel_tool_calls`.
type ChatTools = (Option<Vec<Tool>>, Option<ToolChoice>, Option<bool>);

/// `tools` and `tool_choice` in the chat shape.
fn tools(
    tools: Option<&[AnthropicTool]>,
    choice: Option<&AnthropicToolChoice>,
) -> Result<ChatTools, ValidationError> {
    let list = tools.map(|ts| {
        ts.iter()
            .map(|t| Tool {
                kind: "function".into(),
                function: FunctionDef {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: t.input_schema.clone(),
                    strict: None,
                },
            })
            .collect()
    });
    let Some(c) = choice else {
        return Ok((list, None, None));
    };
    let mode = |m: &str| Some(ToolChoice::Mode(m.into()));
    let tc = match (c.kind.as_str(), &c.name) {
        ("auto", _) => mode("auto"),
        ("any", _) => mode("required"),
        ("none", _) => mode("none"),
        ("tool", Some(name)) => Some(ToolChoice::Named(NamedToolChoice {
            kind: "function".into(),
            function: NamedFunction { name: name.clone() },
        })),
        (k, _) => {
            return Err(invalid(
                "tool_choice",
                format!("tool_choice.type must be auto, any, tool (with name) or none, got `{k}`"),
            ));
        }
    };
    Ok((list, tc, c.disable_parallel_tool_use.then_some(false)))
}

/// The chat messages of `system` and `messages`.
pub fn conversation(
    system: Option<&SystemPrompt>,
    messages: &[InMessage],
) -> Result<Vec<WireMessage>, ValidationError> {
    let mut msgs = Vec::new();
    if let Some(s) = system {
        msgs.push(text_message("system", system_text(s)?));
    }
    for (i, m) in messages.iter().enumerate() {
        push_message(i, m, &mut msgs)?;
    }
    Ok(msgs)
}

/// The template's thinking switches (`enable_thinking`, `thinking`) from `thinking`.
fn thinking_switch(
    r: &MessagesRequest,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, ValidationError> {
    let Some(t) = &r.thinking else {
        return Ok(None);
    };
    let on = match t.kind.as_str() {
        "enabled" => true,
        "disabled" => false,
        other => {
            return Err(invalid(
                "thinking",
                format!("thinking.type must be `enabled` or `disabled`, got `{other}`"),
            ));
        }
    };
    if on && t.budget_tokens.is_none_or(|b| b < 1 || b >= r.max_tokens) {
        return Err(invalid(
            "thinking",
            "thinking.budget_tokens must be at least 1 and less than max_tokens".to_string(),
        ));
    }
    let mut kw = serde_json::Map::new();
    kw.insert("enable_thinking".into(), on.into());
    kw.insert("thinking".into(), on.into());
    Ok(Some(kw))
}

/// The chat request a Messages request asks for.
pub fn chat_request(r: &MessagesRequest) -> Result<ChatRequest, ValidationError> {
    if r.max_tokens < 1 {
        return Err(invalid(
            "max_tokens",
            format!("max_tokens must be at least 1, got {}", r.max_tokens),
        ));
    }
    let tools = tools(r.tools.as_deref(), r.tool_choice.as_ref())?;
    let response_format = match r.output_config.as_ref().and_then(|c| c.format.as_ref()) {
        None => None,
        Some(f) if f.kind == "json_schema" => Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: None,
                description: None,
                schema: f.schema.clone(),
                strict: Some(true),
            },
        }),
        Some(f) => {
            return Err(invalid(
                "output_config",
                format!(
                    "output_config.format.type must be json_schema, got `{}`",
                    f.kind
                ),
            ));
        }
    };
    let common = CommonParams {
        model: r.model.clone(),
        max_tokens: Some(r.max_tokens),
        temperature: r.temperature,
        top_p: r.top_p,
        top_k: r.top_k,
        stream: r.stream,
        stop: r.stop_sequences.clone().map(StopInput::Many),
        response_format,
        ..CommonParams::default()
    };
    let mut chat = request(r.system.as_ref(), &r.messages, tools, common)?;
    chat.chat_template_kwargs = thinking_switch(r)?;
    chat.thinking_token_budget = r.thinking.as_ref().and_then(|t| t.budget_tokens);
    Ok(chat)
}

/// The chat request whose prompt `count_tokens` measures.
pub fn count_request(
    r: &crate::api::anthropic::CountTokensRequest,
) -> Result<ChatRequest, ValidationError> {
    let tools = tools(r.tools.as_deref(), r.tool_choice.as_ref())?;
    let common = CommonParams {
        model: r.model.clone(),
        ..CommonParams::default()
    };
    request(r.system.as_ref(), &r.messages, tools, common)
}

/// The chat request of a conversation and its tools; `common` holds the other fields.
fn request(
    system: Option<&SystemPrompt>,
    messages: &[InMessage],
    (tools, tool_choice, parallel): ChatTools,
    common: CommonParams,
) -> Result<ChatRequest, ValidationError> {
    Ok(ChatRequest {
        messages: conversation(system, messages)?,
        max_completion_tokens: None,
        logprobs: false,
        top_logprobs: None,
        tools,
        tool_choice,
        chat_template_kwargs: None,
        reasoning_effort: None,
        thinking_token_budget: None,
        parallel_tool_calls: parallel,
        common,
    })
}

/// The Messages names of the chat fields it spells its own way.
pub const FIELDS: Fields = Fields {
    messages: "messages",
    max_tokens: "max_tokens",
    stop: "stop_sequences",
    response_format: "output_config",
};
