//! The OpenAPI description of every route and wire type (utoipa), served at
//! `/openapi.json` with a browsable page at `/docs`.

use utoipa::OpenApi;

use super::openai::types::*;
use super::{health, openai};

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "sluice",
        description = "An OpenAI-compatible LLM inference server with a static-shape engine.",
        license(name = "MIT")
    ),
    paths(
        openai::completions::handle,
        openai::chat::handle,
        openai::models::list,
        openai::models::get_one,
        openai::tokenize::tokenize,
        openai::tokenize::detokenize,
        health::health,
        health::ready,
        health::metrics,
    ),
    components(schemas(
        CompletionRequest, ChatRequest, CommonParams, PromptInput, StopInput, StreamOptions,
        WireMessage, MessageContent, ContentPart, CompletionResponse, CompletionChoice,
        CompletionLogprobs, ChatResponse, ChatChoice, ChatMessageOut, ChatLogprobs,
        ChatTokenLogprob, TopLogprob, ChatChunk, ChatChunkChoice, ChatDelta, Usage, ModelList,
        ModelCard, TokenizeRequest, TokenizeResponse, DetokenizeRequest, DetokenizeResponse,
        ErrorResponse, ErrorDetail, Status,
    )),
    tags(
        (name = "openai", description = "OpenAI-compatible endpoints"),
        (name = "tokens", description = "Tokenizer endpoints (vLLM's shapes)"),
        (name = "operations", description = "Health, readiness and metrics"),
    )
)]
pub struct ApiDoc;

/// The spec as pretty JSON (what `sluice openapi` prints and `openapi/openapi.json` holds).
pub fn json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the spec serialises")
}
