//! The OpenAPI description of every route and wire type (utoipa), served at
//! `/openapi.json` with a browsable page at `/docs` (served from the binary: `ui.rs`).

use utoipa::OpenApi;

use super::{admin, health, messages, openai, responses};
use crate::api::admin::{CheckpointInfo, Mode, ReloadRequest, ReloadResponse, WeightsInfo};
use crate::api::*;

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
        openai::embeddings::handle,
        openai::rerank::handle,
        openai::tokenize::tokenize,
        openai::tokenize::detokenize,
        openai::tokenize::info,
        responses::handle,
        messages::handle,
        messages::count_tokens,
        health::health,
        health::ready,
        health::metrics,
        admin::reload,
        admin::weights,
    ),
    components(schemas(
        CompletionRequest, ChatRequest, CommonParams, PromptInput, StopInput, StreamOptions,
        WireMessage, MessageContent, ContentPart, CompletionResponse, CompletionChoice,
        CompletionLogprobs, ChatResponse, ChatChoice, ChatMessageOut, ChatLogprobs,
        ChatTokenLogprob, TopLogprob, ChatChunk, ChatChunkChoice, ChatDelta, Usage, ModelList,
        ModelCard, TokenizeRequest, TokenizeResponse, DetokenizeRequest, DetokenizeResponse,
        ErrorResponse, ErrorDetail, Status, ReloadRequest, ReloadResponse, WeightsInfo,
        CheckpointInfo, Mode,
    )),
    modifiers(&AdminToken),
    tags(
        (name = "openai", description = "OpenAI-compatible endpoints"),
        (name = "anthropic", description = "Anthropic's Messages API"),
        (name = "tokens", description = "Tokenizer endpoints (vLLM's shapes)"),
        (name = "operations", description = "Health, readiness and metrics"),
        (name = "admin", description = "Weight reload (only with --admin-token)"),
    )
)]
pub struct ApiDoc;

/// The bearer scheme of the admin routes.
struct AdminToken;

impl utoipa::Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The spec as pretty JSON (what `sluice openapi` prints and `openapi/openapi.json` holds).
pub fn json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the spec serialises")
}
