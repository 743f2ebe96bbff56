//! `POST /tokenize` and `POST /detokenize` (vLLM's shapes).

use axum::extract::State;

use crate::api::{
    DetokenizeRequest, DetokenizeResponse, ErrorResponse, TokenizeRequest, TokenizeResponse,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{AppState, off_thread};
use crate::validation::{ValidationError, check_model, messages};

/// Token ids of a prompt, or of a conversation rendered through the chat template.
#[utoipa::path(
    post,
    path = "/tokenize",
    tag = "tokens",
    request_body = TokenizeRequest,
    responses((status = 200, body = TokenizeResponse), (status = 400, body = ErrorResponse), (status = 404, body = ErrorResponse))
)]
pub async fn tokenize(
    State(s): State<AppState>,
    Json(r): Json<TokenizeRequest>,
) -> Result<axum::Json<TokenizeResponse>, ApiError> {
    check_model(r.model.as_deref(), &s.model_name)?;
    let st = s.clone();
    off_thread(move || {
        let text = match (&r.prompt, &r.messages) {
            (Some(p), None) => p.clone(),
            (None, Some(m)) => st.tokenizer.apply_chat_template(&messages(m)?)?,
            _ => {
                return Err(ValidationError::invalid(
                    "prompt",
                    "give exactly one of `prompt` and `messages`",
                )
                .into());
            }
        };
        sluice_engine::failpoint::check("handler-panic", &text);
        let tokens = st.tokenizer.encode(&text)?;
        Ok(axum::Json(TokenizeResponse {
            count: tokens.len(),
            max_model_len: st.limits.context,
            tokens,
        }))
    })
    .await
}

/// Text of token ids.
#[utoipa::path(
    post,
    path = "/detokenize",
    tag = "tokens",
    request_body = DetokenizeRequest,
    responses((status = 200, body = DetokenizeResponse), (status = 400, body = ErrorResponse), (status = 404, body = ErrorResponse))
)]
pub async fn detokenize(
    State(s): State<AppState>,
    Json(r): Json<DetokenizeRequest>,
) -> Result<axum::Json<DetokenizeResponse>, ApiError> {
    check_model(r.model.as_deref(), &s.model_name)?;
    if let Some(t) = r
        .tokens
        .iter()
        .find(|&&t| t as usize >= s.tokenizer.vocab_size)
    {
        return Err(ValidationError::invalid(
            "tokens",
            format!("token id {t} is outside the vocabulary"),
        )
        .into());
    }
    let st = s.clone();
    let prompt = off_thread(move || st.tokenizer.decode(&r.tokens)).await?;
    Ok(axum::Json(DetokenizeResponse { prompt }))
}
