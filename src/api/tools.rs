//! Wire types of OpenAI tool calling.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A function the model may call.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct FunctionDef {
    /// Its name (what `tool_choice` and the call refer to).
    pub name: String,
    /// What it does, for the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments (an object schema; default: any object).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub parameters: Option<serde_json::Value>,
    /// OpenAI's strict mode; constrained calls always follow the schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// One entry of `tools`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Tool {
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function.
    pub function: FunctionDef,
}

/// The function named by `tool_choice`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct NamedFunction {
    /// Its name.
    pub name: String,
}

/// `tool_choice: {"type": "function", "function": {"name": ...}}`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct NamedToolChoice {
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function to call.
    pub function: NamedFunction,
}

/// `tool_choice`: `none`, `auto`, `required`, or a named function.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ToolChoice {
    /// `none`, `auto` or `required`.
    Mode(String),
    /// Call this function.
    Named(NamedToolChoice),
}

/// A function call's name and JSON-encoded arguments.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, ToSchema)]
pub struct FunctionCall {
    /// The function.
    pub name: String,
    /// Its arguments as a JSON string.
    pub arguments: String,
}

/// A tool call, in an assistant message (request history or response).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, ToSchema)]
pub struct ToolCall {
    /// Call id (`call_...`); a `tool` message answers it by this id.
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The call.
    pub function: FunctionCall,
}

/// The function part of a streamed tool-call delta.
#[derive(Clone, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct FunctionCallDelta {
    /// The function name, on the call's first delta.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The next piece of the arguments' JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// A streamed piece of a tool call.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ToolCallDelta {
    /// Which call of the message (0, 1, ...).
    pub index: usize,
    /// Call id, on the call's first delta.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `function`, on the call's first delta.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Name and/or argument piece.
    pub function: FunctionCallDelta,
}
