//! Reasoning fields of a chat request: `reasoning_effort` and the template's thinking
//! switch, `thinking_token_budget`, and the thinking section its answers start with
//! (docs/ARCHITECTURE.md, "Reasoning").

use serde_json::{Map, Value};
use sluice_engine::{ThinkSpec, Tokenizer};

use super::ValidationError;
use crate::api::ChatRequest;
use crate::reasoning::{ReasoningFormat, ReasoningReader};
use crate::tools::ToolFormat;

/// The variables the chat template gets beside the messages: `chat_template_kwargs`, and
/// from `reasoning_effort` the template's `reasoning_effort` and its thinking switches
/// (`enable_thinking` as Qwen 3 and SmolLM3 name it, `thinking` as Granite does), off for
/// `none`. What `chat_template_kwargs` sets itself wins.
pub(super) fn template_kwargs(r: &ChatRequest) -> Map<String, Value> {
    let mut kw = r.chat_template_kwargs.clone().unwrap_or_default();
    if let Some(effort) = &r.reasoning_effort {
        let on = effort != "none";
        kw.entry("reasoning_effort")
            .or_insert_with(|| Value::from(effort.as_str()));
        kw.entry("enable_thinking").or_insert(Value::from(on));
        kw.entry("thinking").or_insert(Value::from(on));
    }
    kw
}

/// Checks the reasoning fields.
pub(super) fn check(r: &ChatRequest) -> Result<(), ValidationError> {
    if let Some(e) = &r.reasoning_effort
        && !["none", "minimal", "low", "medium", "high"].contains(&e.as_str())
    {
        return Err(ValidationError::invalid(
            "reasoning_effort",
            format!("`reasoning_effort` must be none, minimal, low, medium or high, got `{e}`"),
        ));
    }
    if let Some(b) = r.thinking_token_budget
        && b < 0
    {
        return Err(ValidationError::invalid(
            "thinking_token_budget",
            format!("`thinking_token_budget` must be at least 0, got {b}"),
        ));
    }
    Ok(())
}

/// The thinking of a request whose rendered prompt is `prompt`, when the model thinks
/// (its chat template has thinking markers): how its answers are split, and what the
/// engine enforces. `budget` is the thinking token budget, if any.
pub(super) fn plan(
    tok: &Tokenizer,
    prompt: &str,
    budget: Option<usize>,
    tools: Option<ToolFormat>,
) -> Result<Option<(ReasoningReader, ThinkSpec)>, ValidationError> {
    let Some(format) = tok
        .chat_template
        .as_ref()
        .and_then(|t| ReasoningFormat::of_template(&t.source))
    else {
        return Ok(None);
    };
    let open = format.opened_by(prompt);
    let spec = ThinkSpec {
        start: format.start().to_string(),
        start_id: tok.id(format.start()),
        end: format.end().to_string(),
        end_ids: tok.encode_with(format.end(), false, true)?,
        open,
        budget,
    };
    let interrupt = (tools == Some(ToolFormat::Qwen3Coder)).then_some("<tool_call>");
    let reader = ReasoningReader {
        format,
        open,
        interrupt,
    };
    Ok(Some((reader, spec)))
}
