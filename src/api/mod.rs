//! Wire types: requests as clients send them, responses in OpenAI's shapes (and the admin
//! API's in `admin`). Only the HTTP layer and validation use them; validation turns them
//! into engine requests.

pub mod admin;
pub mod anthropic;
pub mod embeddings;
pub mod models;
pub mod rerank;
pub mod responses;
pub mod scoring;
pub mod structured;
pub mod tokens;
pub mod tools;

pub use models::{ModelCard, ModelList, ModelQuery};
use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use tokens::{DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse};

/// `prompt`: a string, strings, token ids, or arrays of token ids.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum PromptInput {
    /// One text prompt.
    Text(String),
    /// Several text prompts.
    Texts(Vec<String>),
    /// One prompt as token ids.
    Ids(Vec<u32>),
    /// Several prompts as token ids.
    IdLists(Vec<Vec<u32>>),
}

/// `stop`: one string or a list.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StopInput {
    /// One stop string.
    One(String),
    /// Several stop strings.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a final chunk with the usage totals.
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling and stopping fields common to completions and chat.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct CommonParams {
    /// Model id (default: the server's first model).
    #[schema(example = "SmolLM2-135M-Instruct.Q4_1")]
    pub model: Option<String>,
    /// Tokens to generate at most.
    #[schema(example = 32)]
    pub max_tokens: Option<i64>,
    /// Sampling temperature 0..=2; 0 is greedy. Default 1.
    #[schema(example = 0.7)]
    pub temperature: Option<f32>,
    /// Nucleus cut-off in (0, 1]. Default 1.
    pub top_p: Option<f32>,
    /// Choices per prompt. Default 1.
    pub n: Option<i64>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Up to 4 stop strings.
    pub stop: Option<StopInput>,
    /// Seed for reproducible sampling.
    pub seed: Option<i64>,
    /// Presence penalty -2..=2.
    pub presence_penalty: Option<f32>,
    /// Frequency penalty -2..=2.
    pub frequency_penalty: Option<f32>,
    /// Token id (as a string) to bias -100..=100.
    pub logit_bias: Option<HashMap<String, f32>>,
    /// End-user id (recorded, not used).
    pub user: Option<String>,
    /// Keep the k most likely tokens; 0 or -1 disables.
    pub top_k: Option<i64>,
    /// Drop tokens under min_p x the best probability.
    pub min_p: Option<f32>,
    /// Multiplicative repetition penalty (> 0; 1 disables).
    pub repetition_penalty: Option<f32>,
    /// Extra token ids that end generation.
    pub stop_token_ids: Option<Vec<u32>>,
    /// Do not stop at the model's end-of-sequence tokens.
    #[serde(default)]
    pub ignore_eos: bool,
    /// Generate at least this many tokens before any stop applies.
    pub min_tokens: Option<i64>,
    /// OpenAI's output format: `text`, `json_object` or `json_schema`.
    pub response_format: Option<structured::ResponseFormat>,
    /// vLLM's constraints: `json`, `regex`, `choice` or `grammar`.
    pub structured_outputs: Option<structured::StructuredOutputs>,
    /// Older vLLM name of `structured_outputs.json`.
    #[schema(value_type = Object)]
    pub guided_json: Option<serde_json::Value>,
    /// Older vLLM name of `structured_outputs.regex`.
    pub guided_regex: Option<String>,
    /// Older vLLM name of `structured_outputs.choice`.
    pub guided_choice: Option<Vec<String>>,
    /// Older vLLM name of `structured_outputs.grammar`.
    pub guided_grammar: Option<String>,
    /// vLLM's prompt log-probabilities: this many alternatives per prompt token (0..=20)
    /// besides the token itself. With it, `max_tokens` may be 0.
    pub prompt_logprobs: Option<i64>,
    /// llama.cpp's switch: `false` never reuses another request's prompt keys and values.
    pub cache_prompt: Option<bool>,
    /// vLLM's beam search (completions, not streamed): `best_of` (else `n`) beams, the `n`
    /// best returned; no sampling fields.
    #[serde(default)]
    pub use_beam_search: bool,
    /// Beam scores are `cumulative logprob / length ^ length_penalty` (default 1).
    pub length_penalty: Option<f32>,
}

/// `POST /v1/completions`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[schema(example = json!({"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}))]
pub struct CompletionRequest {
    /// The prompt(s).
    pub prompt: PromptInput,
    /// Return the prompt before the completion.
    #[serde(default)]
    pub echo: bool,
    /// Log-probabilities of the chosen token and this many alternatives (0..=20). With
    /// `echo`, the prompt's tokens come first (the first with null); `max_tokens` may be 0.
    pub logprobs: Option<i64>,
    /// Generate this many choices per prompt and return the `n` with the highest total
    /// log-probability (not with `stream`).
    pub best_of: Option<i64>,
    /// Common fields.
    #[serde(flatten)]
    pub common: CommonParams,
}

/// One part of a multi-part message content.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ContentPart {
    /// Only `text` is supported.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    pub text: Option<String>,
}

/// A message's content: a string or text parts.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Content parts.
    Parts(Vec<ContentPart>),
}

/// One chat message.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct WireMessage {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// Text content (null is treated as empty).
    pub content: Option<MessageContent>,
    /// An assistant's earlier tool calls.
    pub tool_calls: Option<Vec<tools::ToolCall>>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// A name for the author (for `tool` messages: the function).
    pub name: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[schema(example = json!({"messages": [{"role": "user", "content": "What is the capital of Germany?"}], "max_tokens": 32}))]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<WireMessage>,
    /// Newer name of `max_tokens`.
    pub max_completion_tokens: Option<i64>,
    /// Return log-probabilities of the chosen tokens.
    #[serde(default)]
    pub logprobs: bool,
    /// Alternatives per token (0..=20), needs `logprobs`.
    pub top_logprobs: Option<i64>,
    /// Functions the model may call.
    pub tools: Option<Vec<tools::Tool>>,
    /// `none`, `auto` (default with tools), `required`, or `{"type": "function",
    /// "function": {"name": ...}}`.
    pub tool_choice: Option<tools::ToolChoice>,
    /// Whether several calls may be made in one answer (default true).
    pub parallel_tool_calls: Option<bool>,
    /// More variables for the chat template, as vLLM takes them (e.g. `{"enable_thinking":
    /// false}` for Qwen 3).
    #[schema(value_type = Option<Object>)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// How hard a reasoning model thinks: `none` turns its thinking off where the chat
    /// template has a switch (`enable_thinking`); any value is passed to the template as
    /// `reasoning_effort`.
    pub reasoning_effort: Option<String>,
    /// Tokens a reasoning model may think before its end-of-thinking marker is forced
    /// (vLLM's field).
    pub thinking_token_budget: Option<i64>,
    /// Common fields.
    #[serde(flatten)]
    pub common: CommonParams,
}

/// Token counts of a response.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct Usage {
    /// Prompt tokens (once per prompt, whatever `n`).
    pub prompt_tokens: usize,
    /// Generated tokens over all choices.
    pub completion_tokens: usize,
    /// The sum.
    pub total_tokens: usize,
    /// Of the completion tokens, those a reasoning model thought (present when it did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// `usage.completion_tokens_details`.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct CompletionTokensDetails {
    /// Tokens of the thinking sections, their markers included.
    pub reasoning_tokens: usize,
}

/// `logprobs` of a completions choice (the legacy format).
#[derive(Clone, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct CompletionLogprobs {
    /// Token strings.
    pub tokens: Vec<String>,
    /// Log-probability of each token (null for the first prompt token under `echo`).
    pub token_logprobs: Vec<Option<f32>>,
    /// Alternatives of each token: token string to log-probability (null likewise).
    pub top_logprobs: Vec<Option<HashMap<String, f32>>>,
    /// Byte offset of each token in the choice's text.
    pub text_offset: Vec<usize>,
}

/// One choice of a completions response or chunk.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct CompletionChoice {
    /// Position: prompt index x n + choice index.
    pub index: usize,
    /// Generated text (or its delta in a chunk).
    pub text: String,
    /// Log-probabilities when asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop` or `length` on the final answer or chunk, else null.
    pub finish_reason: Option<&'static str>,
    /// The prompt's log-probabilities, when `prompt_logprobs` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<scoring::PromptLogprobs>,
}

/// `POST /v1/completions` response, and each streamed chunk.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct CompletionResponse {
    /// Request id.
    pub id: String,
    /// `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// Served model id.
    pub model: String,
    /// Version of the weights that produced the answer.
    pub system_fingerprint: String,
    /// The choices.
    pub choices: Vec<CompletionChoice>,
    /// Token counts (final answer, or the last chunk with include_usage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One alternative token in the chat logprobs format.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct TopLogprob {
    /// Token text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// UTF-8 bytes of the token.
    pub bytes: Vec<u8>,
}

/// One generated token in the chat logprobs format.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ChatTokenLogprob {
    /// Token text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// UTF-8 bytes of the token.
    pub bytes: Vec<u8>,
    /// The most likely alternatives.
    pub top_logprobs: Vec<TopLogprob>,
}

/// `logprobs` of a chat choice.
#[derive(Clone, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct ChatLogprobs {
    /// One entry per generated token.
    pub content: Vec<ChatTokenLogprob>,
}

/// The assistant's message.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ChatMessageOut {
    /// `assistant`.
    pub role: &'static str,
    /// Generated text (null when the answer is only tool calls).
    pub content: Option<String>,
    /// A reasoning model's thinking (vLLM's and DeepSeek's field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The calls the model made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<tools::ToolCall>>,
}

/// One choice of a chat response.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ChatChoice {
    /// Choice index.
    pub index: usize,
    /// The answer.
    pub message: ChatMessageOut,
    /// Log-probabilities when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: Option<&'static str>,
}

/// `POST /v1/chat/completions` response.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ChatResponse {
    /// Request id.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// Served model id.
    pub model: String,
    /// Version of the weights that produced the answer.
    pub system_fingerprint: String,
    /// The choices.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
    /// The prompt's log-probabilities, when `prompt_logprobs` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<scoring::PromptLogprobs>,
}

/// The changed part of a streamed chat message.
#[derive(Clone, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct ChatDelta {
    /// `assistant`, on the first chunk of a choice only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// New text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// New thinking text, when a reasoning model thinks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Pieces of tool calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<tools::ToolCallDelta>>,
}

/// One choice of a chat chunk.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ChatChunkChoice {
    /// Choice index.
    pub index: usize,
    /// What changed.
    pub delta: ChatDelta,
    /// Log-probabilities of the chunk's tokens when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// Set on the last chunk of the choice.
    pub finish_reason: Option<&'static str>,
}

/// A streamed chat chunk.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ChatChunk {
    /// Request id (the same on every chunk).
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// Served model id.
    pub model: String,
    /// Version of the weights.
    pub system_fingerprint: String,
    /// Choices that changed.
    pub choices: Vec<ChatChunkChoice>,
    /// Totals, on the final usage chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The detail of an error.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What went wrong.
    #[schema(example = "`temperature` must be between 0 and 2, got 3")]
    pub message: String,
    /// `invalid_request_error`, `rate_limit_error`, `server_error`, ...
    #[serde(rename = "type")]
    #[schema(example = "invalid_request_error")]
    pub kind: String,
    /// The request field at fault.
    #[schema(example = "temperature")]
    pub param: Option<String>,
    /// A short machine-readable code.
    #[schema(example = "invalid_value")]
    pub code: Option<String>,
}

/// Every error response: OpenAI's error body.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorDetail,
}

/// `GET /health` and `GET /ready` when healthy.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Status {
    /// `ok` or `ready`.
    #[schema(example = "ok")]
    pub status: String,
}

/// The error responses of the generation endpoints (OpenAPI).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum GenerationErrors {
    /// An invalid field (named in `param`) or malformed JSON.
    #[response(status = 400)]
    BadRequest(ErrorResponse),
    /// Missing or wrong API key (when the server has `--api-key`).
    #[response(status = 401)]
    Unauthorized(ErrorResponse),
    /// Unknown model.
    #[response(status = 404)]
    NotFound(ErrorResponse),
    /// Body over the size limit.
    #[response(status = 413)]
    TooLarge(ErrorResponse),
    /// Queue full; retry after `Retry-After` seconds.
    #[response(status = 429)]
    QueueFull(ErrorResponse),
    /// Model loading, engine not running, or the server draining.
    #[response(status = 503)]
    Unavailable(ErrorResponse),
    /// The request ran past `--request-timeout`.
    #[response(status = 504)]
    Timeout(ErrorResponse),
}
