//! Wire types of Anthropic's Messages API (`POST /v1/messages`,
//! `POST /v1/messages/count_tokens`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A content block of a request message: `text`, `tool_use` (an earlier call, in an
/// assistant message) or `tool_result` (its answer, in a user message).
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct InBlock {
    /// `text`, `tool_use` or `tool_result`; other kinds (images, documents) are refused.
    #[serde(rename = "type")]
    pub kind: String,
    /// A `text` block's text.
    pub text: Option<String>,
    /// A `tool_use` block's id.
    pub id: Option<String>,
    /// A `tool_use` block's tool.
    pub name: Option<String>,
    /// A `tool_use` block's input object.
    #[schema(value_type = Object)]
    pub input: Option<serde_json::Value>,
    /// The `tool_use` id a `tool_result` answers.
    pub tool_use_id: Option<String>,
    /// A `tool_result`'s content: a string or text blocks.
    #[schema(value_type = Object)]
    pub content: Option<serde_json::Value>,
    /// A `tool_result` that reports a failure.
    pub is_error: Option<bool>,
}

/// A message's content: a string or blocks.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum InContent {
    /// Plain text.
    Text(String),
    /// Content blocks.
    Blocks(Vec<InBlock>),
}

/// One message of the conversation.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct InMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// Its content.
    pub content: InContent,
}

/// `system`: a string or text blocks.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum SystemPrompt {
    /// Plain text.
    Text(String),
    /// Text blocks.
    Blocks(Vec<InBlock>),
}

/// A tool the model may use.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct AnthropicTool {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// JSON Schema of its input.
    #[schema(value_type = Object)]
    pub input_schema: Option<serde_json::Value>,
}

/// `tool_choice`: `auto`, `any`, `tool` (with `name`) or `none`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct AnthropicToolChoice {
    /// `auto`, `any`, `tool` or `none`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The tool, for `tool`.
    pub name: Option<String>,
    /// At most one call.
    #[serde(default)]
    pub disable_parallel_tool_use: bool,
}

/// `output_config.format`: JSON following a schema.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct OutputFormat {
    /// `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The JSON Schema the answer follows.
    #[schema(value_type = Object)]
    pub schema: Option<serde_json::Value>,
}

/// `output_config`: the answer's format (`effort` is accepted and not used).
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct OutputConfig {
    /// Structured output.
    pub format: Option<OutputFormat>,
    /// Reasoning effort (not used: the served models do not reason).
    pub effort: Option<String>,
}

/// `POST /v1/messages`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[schema(example = json!({"max_tokens": 64, "messages": [{"role": "user", "content": "Hello"}]}))]
pub struct MessagesRequest {
    /// Model id (default: the server's first model).
    pub model: Option<String>,
    /// Tokens to generate at most (required).
    pub max_tokens: i64,
    /// The conversation.
    pub messages: Vec<InMessage>,
    /// The system prompt.
    pub system: Option<SystemPrompt>,
    /// Strings that end the answer (`stop_reason: stop_sequence`).
    pub stop_sequences: Option<Vec<String>>,
    /// Sampling temperature (0 is greedy).
    pub temperature: Option<f32>,
    /// Nucleus cut-off in (0, 1].
    pub top_p: Option<f32>,
    /// Keep the k most likely tokens.
    pub top_k: Option<i64>,
    /// Stream the answer as named server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Tools the model may use.
    pub tools: Option<Vec<AnthropicTool>>,
    /// How tools are chosen.
    pub tool_choice: Option<AnthropicToolChoice>,
    /// Structured output: `{"format": {"type": "json_schema", "schema": {...}}}`.
    pub output_config: Option<OutputConfig>,
    /// `{"user_id": ...}` (not used).
    #[schema(value_type = Object)]
    pub metadata: Option<serde_json::Value>,
    /// Extended thinking: `{"type": "enabled", "budget_tokens": N}` turns a reasoning
    /// model's thinking on (where its template has a switch) with at most N thinking
    /// tokens; `{"type": "disabled"}` turns it off.
    pub thinking: Option<ThinkingConfig>,
}

/// `thinking` of a Messages request.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ThinkingConfig {
    /// `enabled` or `disabled`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Thinking tokens at most, with `enabled`.
    pub budget_tokens: Option<i64>,
}

/// `POST /v1/messages/count_tokens`: the fields of a request that make its prompt.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct CountTokensRequest {
    /// Model id (default: the server's first model).
    pub model: Option<String>,
    /// The conversation.
    pub messages: Vec<InMessage>,
    /// The system prompt.
    pub system: Option<SystemPrompt>,
    /// Tools the model may use (they are part of the prompt).
    pub tools: Option<Vec<AnthropicTool>>,
    /// How tools are chosen.
    pub tool_choice: Option<AnthropicToolChoice>,
}

/// `count_tokens`' answer.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct CountTokensResponse {
    /// Tokens of the rendered prompt.
    pub input_tokens: usize,
}

/// A content block of an answer.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A reasoning model's thinking, before its answer.
    Thinking {
        /// The thinking.
        thinking: String,
        /// Always empty: this server does not sign thinking.
        signature: String,
    },
    /// A tool call.
    ToolUse {
        /// Call id (`toolu_...`).
        id: String,
        /// The tool.
        name: String,
        /// Its input.
        #[schema(value_type = Object)]
        input: serde_json::Value,
    },
}

/// Token counts of an answer.
#[derive(Clone, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct AnthropicUsage {
    /// Prompt tokens.
    pub input_tokens: usize,
    /// Generated tokens.
    pub output_tokens: usize,
    /// Always 0.
    pub cache_creation_input_tokens: usize,
    /// Always 0.
    pub cache_read_input_tokens: usize,
}

/// `POST /v1/messages` answer (and, empty, in `message_start`).
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct MessagesResponse {
    /// Message id (`msg_...`).
    pub id: String,
    /// `message`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `assistant`.
    pub role: &'static str,
    /// Served model id.
    pub model: String,
    /// The answer's blocks.
    pub content: Vec<OutBlock>,
    /// `end_turn`, `max_tokens`, `stop_sequence` or `tool_use` (null while streaming).
    pub stop_reason: Option<&'static str>,
    /// The stop sequence that ended the answer.
    pub stop_sequence: Option<String>,
    /// Token counts.
    pub usage: AnthropicUsage,
}

/// Anthropic's error body.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AnthropicError {
    /// `error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The error.
    pub error: AnthropicErrorDetail,
}

/// The detail of an Anthropic error.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AnthropicErrorDetail {
    /// `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `request_too_large`, `rate_limit_error`, `api_error`, `overloaded_error`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// What went wrong.
    pub message: String,
}
