//! `POST /v1/embeddings`.

use axum::extract::State;
use base64::Engine as _;

use crate::api::ErrorResponse;
use crate::api::embeddings::{
    EmbeddingData, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, EmbeddingVector,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{ServerState, off_thread};
use crate::validation::ValidationError;
use crate::validation::embeddings::embeddings;

/// The first `d` values, scaled back to unit length.
fn truncate(mut v: Vec<f32>, d: usize) -> Vec<f32> {
    v.truncate(d);
    let norm = v
        .iter()
        .map(|x| (*x as f64) * (*x as f64))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
    }
    v
}

/// The embedding of each input: its final hidden states pooled as the model file says or
/// `--pooling` sets (mean, cls or last), of unit length.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    operation_id = "create_embedding",
    tag = "openai",
    request_body = EmbeddingRequest,
    responses(
        (status = 200, body = EmbeddingResponse),
        (status = 400, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 429, body = ErrorResponse),
        (status = 503, body = ErrorResponse),
    )
)]
pub async fn handle(
    State(server): State<ServerState>,
    Json(r): Json<EmbeddingRequest>,
) -> Result<axum::Json<EmbeddingResponse>, ApiError> {
    let s = server.model(r.model.as_deref()).await?;
    s.check_open()?;
    let Some(pooling) = s.pooling else {
        return Err(ValidationError::invalid(
            "model",
            format!(
                "`{}` serves no embeddings: its file declares no pooling; start the server \
                 with --pooling mean, cls or last",
                s.model_name
            ),
        )
        .into());
    };
    let st = s.clone();
    let plan =
        off_thread(move || embeddings(&r, &st.tokenizer, &st.limits, &st.model_name)).await?;
    let tokens: usize = plan.inputs.iter().map(Vec::len).sum();
    let vectors = s.engine.embed(plan.inputs, pooling).await?;
    let width = vectors.first().map_or(0, Vec::len);
    if let Some(d) = plan.dimensions.filter(|&d| d > width) {
        return Err(ValidationError::invalid(
            "dimensions",
            format!("`dimensions` is {d}, more than the model's {width}"),
        )
        .into());
    }
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let v = match plan.dimensions {
                Some(d) if d < v.len() => truncate(v, d),
                _ => v,
            };
            let embedding = if plan.base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                EmbeddingVector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                EmbeddingVector::Float(v)
            };
            EmbeddingData {
                object: "embedding",
                index,
                embedding,
            }
        })
        .collect();
    Ok(axum::Json(EmbeddingResponse {
        object: "list",
        data,
        model: s.model_name.to_string(),
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    }))
}
