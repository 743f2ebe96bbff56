//! `GET /v1/models` and `GET /v1/models/{id}`.

use axum::Json;
use axum::extract::{Path, State};

use crate::api::{ErrorResponse, ModelCard, ModelList};
use crate::error::ApiError;
use crate::http::AppState;

/// What the served model can do.
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

fn card(s: &AppState) -> ModelCard {
    ModelCard {
        id: s.model_name.to_string(),
        object: "model",
        created: s.started,
        owned_by: "sluice",
        max_model_len: s.limits.context,
        status: "loaded",
        size: s.model_bytes,
        capabilities: capabilities(s),
    }
}

/// Lists the served model.
#[utoipa::path(get, path = "/v1/models", operation_id = "list_models", tag = "openai", responses((status = 200, body = ModelList)))]
pub async fn list(State(s): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![card(&s)],
    })
}

/// Describes the served model; 404 for any other id.
#[utoipa::path(
    get,
    path = "/v1/models/{id}",
    operation_id = "retrieve_model",
    tag = "openai",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, body = ModelCard), (status = 404, body = ErrorResponse))
)]
pub async fn get_one(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    if id != *s.model_name {
        return Err(crate::validation::ValidationError::ModelNotFound(id).into());
    }
    Ok(Json(card(&s)))
}
