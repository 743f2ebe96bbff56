//! `POST /tokenize` and `POST /detokenize` (vLLM's shapes).

use axum::extract::{Query, State};

use crate::api::ModelQuery;

use crate::api::tokens::TokenizerInfo;
use crate::api::{
    DetokenizeRequest, DetokenizeResponse, ErrorResponse, TokenizeRequest, TokenizeResponse,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{ServerState, off_thread};
use crate::validation::{Fields, ValidationError, conversation_text, messages};

/// Token ids of a prompt, or of a conversation rendered through the chat template.
#[utoipa::path(
    post,
    path = "/tokenize",
    tag = "tokens",
    request_body = TokenizeRequest,
    responses((status = 200, body = TokenizeResponse), (status = 400, body = ErrorResponse), (status = 404, body = ErrorResponse))
)]
pub async fn tokenize(
    State(server): State<ServerState>,
    Json(r): Json<TokenizeRequest>,
) -> Result<axum::Json<TokenizeResponse>, ApiError> {
    let st = server.model(r.model.as_deref()).await?;
    off_thread(move || {
        let text = match (&r.prompt, &r.messages) {
            (Some(p), None) => p.clone(),
            (None, Some(m)) => {
                let empty = serde_json::Map::new();
                let kwargs = r.chat_template_kwargs.as_ref().unwrap_or(&empty);
                let msgs = messages(m, Fields::OPENAI.messages)?;
                conversation_text(&msgs, r.tools.as_deref(), kwargs, &st.tokenizer)?
            }
            _ => {
                return Err(ValidationError::invalid(
                    "prompt",
                    "give exactly one of `prompt` and `messages`",
                )
                .into());
            }
        };
        sluice_engine::check_failpoint("handler-panic", &text);
        let mut tokens = st.tokenizer.encode(&text)?;
        if r.add_special_tokens == Some(false)
            && r.prompt.is_some()
            && st.tokenizer.bos.is_some_and(|b| tokens.first() == Some(&b))
        {
            tokens.remove(0);
        }
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
    State(server): State<ServerState>,
    Json(r): Json<DetokenizeRequest>,
) -> Result<axum::Json<DetokenizeResponse>, ApiError> {
    let s = server.model(r.model.as_deref()).await?;
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

/// What a client tokenising remotely needs to know (lm-evaluation-harness's
/// `tokenizer_backend=remote` reads it).
#[utoipa::path(
    get,
    path = "/tokenizer_info",
    tag = "tokens",
    params(ModelQuery),
    responses((status = 200, body = TokenizerInfo), (status = 404, body = ErrorResponse))
)]
pub async fn info(
    State(server): State<ServerState>,
    Query(q): Query<ModelQuery>,
) -> Result<axum::Json<TokenizerInfo>, ApiError> {
    let s = server.model(q.model.as_deref()).await?;
    let t = &s.tokenizer;
    let text = |id: Option<u32>| id.and_then(|i| t.decode(&[i]).ok());
    Ok(axum::Json(TokenizerInfo {
        eos_token: text(t.end_ids.first().copied()),
        bos_token: text(t.bos),
        add_bos_token: t.add_bos,
        model_max_length: s.limits.context,
        chat_template: t.chat_template.as_ref().map(|c| c.source.clone()),
    }))
}
