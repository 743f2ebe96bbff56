//! Wire types of OpenAI's Responses API (`POST /v1/responses`), served statelessly: the
//! request carries the whole conversation; nothing is stored.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `input`: one user message as a string, or a list of items.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ResponsesInput {
    /// One user message.
    Text(String),
    /// Messages, earlier function calls and their outputs.
    Items(Vec<InputItem>),
}

/// A content part of an input message: `input_text` (or `output_text` in an earlier
/// assistant message); other kinds are refused.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct InputPart {
    /// `input_text` or `output_text`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text.
    pub text: Option<String>,
}

/// A message's content: a string or parts.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum InputContent {
    /// Plain text.
    Text(String),
    /// Content parts.
    Parts(Vec<InputPart>),
}

/// One input item: a message (`type` omitted or `message`), a `function_call` the model
/// made earlier, or a `function_call_output` answering one.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct InputItem {
    /// `message` (the default), `function_call` or `function_call_output`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// A message's role: `user`, `assistant`, `system` or `developer`.
    pub role: Option<String>,
    /// A message's content.
    pub content: Option<InputContent>,
    /// The call a `function_call` made, or the one a `function_call_output` answers.
    pub call_id: Option<String>,
    /// A `function_call`'s function.
    pub name: Option<String>,
    /// A `function_call`'s arguments (a JSON string).
    pub arguments: Option<String>,
    /// A `function_call_output`'s result (a string, or content parts).
    #[schema(value_type = Object)]
    pub output: Option<serde_json::Value>,
}

/// A function tool (the Responses API's flat shape).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct ResponsesTool {
    /// `function` (other built-in tools are refused).
    #[serde(rename = "type")]
    pub kind: String,
    /// The function's name.
    pub name: Option<String>,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub parameters: Option<serde_json::Value>,
    /// Strict mode (calls always follow the schema here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `text.format`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct TextFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The schema's name (`json_schema`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The JSON Schema the output follows (`json_schema`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    pub schema: Option<serde_json::Value>,
    /// What the schema is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Strict mode (always held to the schema here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `text`: the output's format.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
pub struct TextConfig {
    /// The format (default `text`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<TextFormat>,
}

/// `POST /v1/responses`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[schema(example = json!({"input": "Name three colours.", "max_output_tokens": 32}))]
pub struct ResponsesRequest {
    /// Model id (default: the server's first model).
    pub model: Option<String>,
    /// The conversation.
    pub input: ResponsesInput,
    /// A system message put first.
    pub instructions: Option<String>,
    /// Tokens to generate at most.
    pub max_output_tokens: Option<i64>,
    /// Sampling temperature 0..=2.
    pub temperature: Option<f32>,
    /// Nucleus cut-off in (0, 1].
    pub top_p: Option<f32>,
    /// Seed for reproducible sampling (an extension).
    pub seed: Option<i64>,
    /// Stream the response as named server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Must be false or absent: this server stores nothing.
    pub store: Option<bool>,
    /// Refused: this server stores nothing (send the whole conversation as `input`).
    pub previous_response_id: Option<String>,
    /// The output's format (`text.format`: `text`, `json_object` or `json_schema`).
    pub text: Option<TextConfig>,
    /// Functions the model may call.
    pub tools: Option<Vec<ResponsesTool>>,
    /// `none`, `auto`, `required`, or `{"type": "function", "name": ...}`.
    #[schema(value_type = Object)]
    pub tool_choice: Option<serde_json::Value>,
    /// Whether several calls may be made in one response (default true).
    pub parallel_tool_calls: Option<bool>,
    /// Recorded and returned as given.
    #[schema(value_type = Object)]
    pub metadata: Option<serde_json::Value>,
    /// End-user id (not used).
    pub user: Option<String>,
    /// Reasoning options: `effort` (`none` … `high`) as chat completions'
    /// `reasoning_effort`.
    pub reasoning: Option<ReasoningConfig>,
}

/// `reasoning` of a Responses request.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, ToSchema)]
pub struct ReasoningConfig {
    /// `none`, `minimal`, `low`, `medium` or `high`.
    pub effort: Option<String>,
    /// Accepted and ignored (no summaries are written).
    pub summary: Option<String>,
}

/// A part of a reasoning item.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ReasoningText {
    /// `reasoning_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The thinking.
    pub text: String,
}

/// A part of an output message.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct OutputText {
    /// `output_text`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The text.
    pub text: String,
    /// Always empty.
    #[schema(value_type = Vec<Object>)]
    pub annotations: Vec<serde_json::Value>,
}

/// One output item: a `reasoning`, a `message` or a `function_call`.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// The assistant's text.
    Message {
        /// Item id (`msg_...`).
        id: String,
        /// `in_progress`, `completed` or `incomplete`.
        status: &'static str,
        /// `assistant`.
        role: &'static str,
        /// Its parts.
        content: Vec<OutputText>,
    },
    /// A reasoning model's thinking, before its answer.
    Reasoning {
        /// Item id (`rs_...`).
        id: String,
        /// Always empty (no summaries are written).
        #[schema(value_type = Vec<Object>)]
        summary: Vec<serde_json::Value>,
        /// The thinking, as one `reasoning_text` part.
        content: Vec<ReasoningText>,
        /// `in_progress`, `completed` or `incomplete`.
        status: &'static str,
    },
    /// A call of one of the request's functions.
    FunctionCall {
        /// Item id (`fc_...`).
        id: String,
        /// The id a `function_call_output` answers (`call_...`).
        call_id: String,
        /// The function.
        name: String,
        /// Its arguments as a JSON string.
        arguments: String,
        /// `in_progress` or `completed`.
        status: &'static str,
    },
}

/// Token counts of a response.
#[derive(Clone, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct ResponsesUsage {
    /// Prompt tokens.
    pub input_tokens: usize,
    /// Of which reused from an earlier request's cache.
    pub input_tokens_details: InputTokensDetails,
    /// Generated tokens.
    pub output_tokens: usize,
    /// Of which reasoning.
    pub output_tokens_details: OutputTokensDetails,
    /// The sum.
    pub total_tokens: usize,
}

/// `usage.input_tokens_details`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct InputTokensDetails {
    /// Always 0 (not tracked per request).
    pub cached_tokens: usize,
}

/// `usage.output_tokens_details`.
#[derive(Clone, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct OutputTokensDetails {
    /// Tokens of the thinking, its markers included.
    pub reasoning_tokens: usize,
}

/// Why a response is incomplete.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct IncompleteDetails {
    /// `max_output_tokens` (the budget or the context ran out).
    pub reason: &'static str,
}

/// A response object (`POST /v1/responses`, and inside stream events).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ResponseObject {
    /// Response id (`resp_...`).
    pub id: String,
    /// `response`.
    pub object: &'static str,
    /// Unix seconds.
    pub created_at: u64,
    /// `in_progress`, `completed`, `incomplete` or `failed`.
    pub status: &'static str,
    /// Served model id.
    pub model: String,
    /// The output items.
    pub output: Vec<OutputItem>,
    /// Set when `status` is `incomplete`.
    pub incomplete_details: Option<IncompleteDetails>,
    /// Set when `status` is `failed`: `{code, message}`.
    #[schema(value_type = Object)]
    pub error: Option<serde_json::Value>,
    /// As requested.
    pub instructions: Option<String>,
    /// As requested.
    pub max_output_tokens: Option<i64>,
    /// As requested (default 1).
    pub temperature: f32,
    /// As requested (default 1).
    pub top_p: f32,
    /// As requested (default true).
    pub parallel_tool_calls: bool,
    /// As requested (default `auto`).
    #[schema(value_type = Object)]
    pub tool_choice: serde_json::Value,
    /// As requested.
    pub tools: Vec<ResponsesTool>,
    /// As requested.
    pub text: TextConfig,
    /// Always false.
    pub store: bool,
    /// Always null.
    pub previous_response_id: Option<String>,
    /// As given.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    /// Token counts (set once finished).
    pub usage: Option<ResponsesUsage>,
}
