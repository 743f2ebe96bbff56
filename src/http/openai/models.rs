//! `GET /v1/models` and `GET /v1/models/{id}`.

use axum::Json;
use axum::extract::{Path, State};

use crate::api::{ErrorResponse, ModelCard, ModelList};
use crate::config::ModelConfig;
use crate::error::ApiError;
use crate::http::models::Status;
use crate::http::{AppState, ServerState};

/// What a loaded model can do.
fn capabilities(s: &AppState) -> Vec<&'static str> {
    let mut out = vec!["completion"];
    if let Some(t) = &s.tokenizer.chat_template {
        out.push("chat");
        if s.grammars.is_some() {
            out.push("tools");
        }
        if crate::reasoning::ReasoningFormat::of_template(&t.source).is_some() {
            out.push("reasoning");
        }
    }
    if s.pooling.is_some() {
        out.push("embeddings");
    }
    if s.rerank.is_some() {
        out.push("rerank");
    }
    out
}

/// A model's card: what its loaded state says, or what was learnt when it was last
/// loaded (nothing for a model never loaded).
fn card(
    server: &ServerState,
    m: &ModelConfig,
    status: Status,
    state: Option<&AppState>,
) -> ModelCard {
    let mut card = ModelCard {
        id: m.name.clone(),
        object: "model",
        created: server.started,
        owned_by: "sluice",
        max_model_len: None,
        status: status.name(),
        error: server.models.error_of(&m.name),
        size: crate::http::models::bytes_of(&m.path),
        capabilities: Vec::new(),
    };
    if let Some(s) = state {
        card.max_model_len = Some(s.limits.context);
        card.size = s.model_bytes;
        card.capabilities = capabilities(s);
        server.models.remember(&m.name, &card);
    } else if let Some(known) = server.models.remembered(&m.name) {
        card.max_model_len = known.max_model_len;
        card.capabilities = known.capabilities;
    }
    card
}

/// Lists every model offered, the default one first, with its status.
#[utoipa::path(get, path = "/v1/models", operation_id = "list_models", tag = "openai", responses((status = 200, body = ModelList)))]
pub async fn list(State(s): State<ServerState>) -> Json<ModelList> {
    let data = s
        .models
        .statuses()
        .iter()
        .map(|(m, status, state)| card(&s, m, *status, state.as_ref()))
        .collect();
    Json(ModelList {
        object: "list",
        data,
    })
}

/// Describes one model; 404 for an id the server does not offer.
#[utoipa::path(
    get,
    path = "/v1/models/{id}",
    operation_id = "retrieve_model",
    tag = "openai",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, body = ModelCard), (status = 404, body = ErrorResponse))
)]
pub async fn get_one(
    State(s): State<ServerState>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    s.models
        .statuses()
        .iter()
        .find(|(m, ..)| m.name == id)
        .map(|(m, status, state)| Json(card(&s, m, *status, state.as_ref())))
        .ok_or_else(|| crate::validation::ValidationError::ModelNotFound(id).into())
}
