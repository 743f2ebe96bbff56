//! Tool fields of a chat request: the definitions, `tool_choice`, the history's calls and
//! answers, and how the conversation is rendered with them.

use std::collections::HashSet;

use serde_json::{Value, json};
use sluice_engine::{ChatMessage, Constraint, Grammars, Tokenizer};

use super::ValidationError;
use crate::api::tools::{Tool, ToolChoice};
use crate::api::{ChatRequest, WireMessage};
use crate::tools::{ToolFormat, call_grammar, default_system_block, template_tools};

/// What the request's tools mean for its generation and its answer.
pub(super) struct ToolPlan {
    /// The prompt text.
    pub text: String,
    /// The call grammar when a call is required.
    pub constraint: Option<Constraint>,
    /// The format to read calls in (`None`: no tools, or `tool_choice: none`).
    pub format: Option<ToolFormat>,
}

fn bad(param: &'static str, m: impl Into<String>) -> ValidationError {
    ValidationError::invalid(param, m)
}

/// The history's assistant calls in template form (arguments as objects), and a check
/// that every `tool` message answers one of them; `param` names the conversation.
pub(super) fn history(
    msgs: &[WireMessage],
    out: &mut [ChatMessage],
    param: &'static str,
) -> Result<(), ValidationError> {
    let mut ids = HashSet::new();
    for (m, o) in msgs.iter().zip(out.iter_mut()) {
        if let Some(calls) = &m.tool_calls {
            let mut list = Vec::new();
            for c in calls {
                let args: Value = serde_json::from_str(&c.function.arguments).map_err(|e| {
                    bad(
                        param,
                        format!("tool call `{}` has arguments that are not JSON: {e}", c.id),
                    )
                })?;
                ids.insert(c.id.clone());
                list.push(json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": args},
                }));
            }
            o.tool_calls = Some(list);
        }
        if m.role == "tool" {
            match &m.tool_call_id {
                Some(id) if ids.contains(id) => o.tool_call_id = Some(id.clone()),
                Some(id) => {
                    return Err(bad(
                        param,
                        format!("the tool message for `{id}` answers no earlier tool call"),
                    ));
                }
                None => return Err(bad(param, "a `tool` message needs `tool_call_id`")),
            }
        }
        o.name = m.name.clone();
    }
    Ok(())
}

/// The history for a template that has no `tools` variable: earlier calls written as the
/// model writes them, and tool answers as user turns (consecutive ones merged).
fn history_as_text(msgs: &[ChatMessage], f: ToolFormat) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::new();
    for m in msgs {
        if m.role == "tool" {
            let answer = format!("<tool_response>\n{}\n</tool_response>", m.content);
            match out.last_mut() {
                Some(prev)
                    if prev.role == "user" && prev.content.starts_with("<tool_response>") =>
                {
                    prev.content = format!("{}\n{answer}", prev.content)
                }
                _ => out.push(ChatMessage::text("user", &answer)),
            }
            continue;
        }
        let mut content = m.content.clone();
        for c in m.tool_calls.iter().flatten() {
            let call = f.write_call(
                c["function"]["name"].as_str().unwrap_or_default(),
                &c["function"]["arguments"],
            );
            content = if content.is_empty() {
                call
            } else {
                format!("{content}\n{call}")
            };
        }
        out.push(ChatMessage::text(&m.role, &content));
    }
    out
}

/// As `history_as_text`, with the tools described in the system message.
fn without_template_tools(msgs: &[ChatMessage], tools: &[Tool], f: ToolFormat) -> Vec<ChatMessage> {
    let block = default_system_block(tools, f);
    let mut out = history_as_text(msgs, f);
    match out.first_mut() {
        Some(m) if m.role == "system" => m.content = format!("{}\n\n{block}", m.content),
        _ => out.insert(0, ChatMessage::text("system", &block)),
    }
    out
}

/// Checks the tool fields and renders the prompt.
pub(super) fn plan(
    r: &ChatRequest,
    msgs: &[ChatMessage],
    tok: &Tokenizer,
    grammars: Option<&Grammars>,
    forced: Option<ToolFormat>,
) -> Result<ToolPlan, ValidationError> {
    let tools = r.tools.as_deref().unwrap_or_default();
    let mut names = HashSet::new();
    for t in tools {
        if t.kind != "function" {
            return Err(bad(
                "tools",
                format!("tool type `{}` is not supported; only `function`", t.kind),
            ));
        }
        if t.function.name.is_empty() || !names.insert(t.function.name.as_str()) {
            return Err(bad(
                "tools",
                format!(
                    "tool names must be non-empty and unique (`{}`)",
                    t.function.name
                ),
            ));
        }
        if let Some(p) = &t.function.parameters
            && !p.is_object()
        {
            return Err(bad(
                "tools",
                format!(
                    "`{}`: parameters must be a JSON Schema object",
                    t.function.name
                ),
            ));
        }
    }
    let choice = match &r.tool_choice {
        None if tools.is_empty() => "none".to_string(),
        None => "auto".to_string(),
        Some(ToolChoice::Mode(m)) if ["none", "auto", "required"].contains(&m.as_str()) => {
            m.clone()
        }
        Some(ToolChoice::Mode(m)) => {
            return Err(bad(
                "tool_choice",
                format!("`tool_choice` must be none, auto, required or a function, got `{m}`"),
            ));
        }
        Some(ToolChoice::Named(n)) => {
            if n.kind != "function" || !names.contains(n.function.name.as_str()) {
                return Err(bad(
                    "tool_choice",
                    format!(
                        "`tool_choice` names `{}`, which is not in `tools`",
                        n.function.name
                    ),
                ));
            }
            format!("function:{}", n.function.name)
        }
    };
    if choice != "none" && tools.is_empty() {
        return Err(bad("tool_choice", "`tool_choice` needs `tools`"));
    }
    let template = tok.chat_template.as_ref();
    let format =
        forced.unwrap_or_else(|| ToolFormat::of_template(template.map(|t| t.source.as_str())));
    let template = template.ok_or(sluice_engine::TokenizerError::NoChatTemplate)?;
    let active = choice != "none";
    let tool_history = msgs
        .iter()
        .any(|m| m.role == "tool" || m.tool_calls.is_some());
    let kw = &super::reasoning::template_kwargs(r);
    let text = if !active && (template.takes_tools() || !tool_history) {
        template.render_with_kwargs(msgs, None, kw)?
    } else if !active {
        template.render_with_kwargs(&history_as_text(msgs, format), None, kw)?
    } else if template.takes_tools() {
        template.render_with_kwargs(msgs, Some(&template_tools(tools)), kw)?
    } else {
        template.render_with_kwargs(&without_template_tools(msgs, tools, format), None, kw)?
    };
    let parallel = r.parallel_tool_calls.unwrap_or(true);
    // A marker that is one control token in the vocabulary (Mistral's `[TOOL_CALLS]`,
    // Qwen's `<tool_call>`) is asked for as that token, as the model writes it.
    let mark = |m: &str| match tok.id(m) {
        Some(id) => format!("<[{id}]>"),
        None => serde_json::to_string(m).expect("a string serialises"),
    };
    let required: Vec<&Tool> = match choice.strip_prefix("function:") {
        Some(name) => tools.iter().filter(|t| t.function.name == name).collect(),
        None if choice == "required" => tools.iter().collect(),
        None => Vec::new(),
    };
    // Every schema is compiled (a bad one is a 400 whatever the choice); the grammar
    // constrains generation only when a call is required. A required call's grammar holds
    // every tool already, so it is not compiled twice.
    let all: Vec<&Tool> = tools.iter().collect();
    let compile = |ts: &[&Tool], par: bool| -> Result<Constraint, ValidationError> {
        let g = grammars.ok_or_else(|| {
            bad(
                "tools",
                "tool calls are not available for this model's tokenizer",
            )
        })?;
        g.compile(&call_grammar(ts, format, par, &mark))
            .map_err(|e| bad("tools", format!("invalid `tools`: {e}")))
    };
    if active && choice != "required" {
        compile(&all, false)?;
    }
    let constraint = match required.as_slice() {
        [] => None,
        [_] if choice.starts_with("function:") => Some(compile(&required, false)?),
        _ => Some(compile(&required, parallel)?),
    };
    Ok(ToolPlan {
        text,
        constraint,
        format: active.then_some(format),
    })
}

/// A conversation as the chat template renders it, with `tools` in its `tools` variable
/// and `kwargs` beside (`POST /tokenize`, as vLLM's).
pub(super) fn render(
    msgs: &[ChatMessage],
    tools: Option<&[Tool]>,
    kwargs: &serde_json::Map<String, serde_json::Value>,
    tok: &Tokenizer,
) -> Result<String, ValidationError> {
    let template = tok
        .chat_template
        .as_ref()
        .ok_or(sluice_engine::TokenizerError::NoChatTemplate)?;
    let tools = tools.map(template_tools);
    Ok(template.render_with_kwargs(msgs, tools.as_deref(), kwargs)?)
}
