//! `GET /v1/models` and `GET /v1/models/{id}`.

use axum::Json;
use axum::extract::{Path, State};

use super::types::{ModelCard, ModelList};
use crate::error::ApiError;
use crate::http::AppState;

fn card(s: &AppState) -> ModelCard {
    ModelCard {
        id: s.model_name.to_string(),
        object: "model",
        created: s.started,
        owned_by: "sluice",
        max_model_len: s.limits.context,
    }
}

/// Lists the served model.
pub async fn list(State(s): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![card(&s)],
    })
}

/// Describes the served model; 404 for any other id.
pub async fn get_one(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    if id != *s.model_name {
        return Err(ApiError::model_not_found(&id));
    }
    Ok(Json(card(&s)))
}
