//! A JSON body extractor whose every failure is an OpenAI-shaped error: malformed JSON and
//! wrong field types are 400s naming the field, an oversized body is 413, whatever the
//! request's content type says (curl's `-d` sends form encoding by default).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A deserialised JSON body.
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| ApiError {
            status: e.status(),
            message: match e.status().as_u16() {
                413 => "the request body is larger than the server's limit".to_string(),
                _ => e.body_text(),
            },
            param: None,
            code: Some(if e.status().as_u16() == 413 { "body_too_large" } else { "invalid_body" }),
        })?;
        parse(&bytes).map(Json)
    }
}

/// Parses a JSON body, naming the offending field on failure.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let what = if inner.is_syntax() || inner.is_eof() { "malformed JSON body" } else { "invalid request body" };
        ApiError {
            param: (path != "." && !path.is_empty()).then_some(path.clone()),
            ..ApiError::bad_request(if path == "." || path.is_empty() {
                format!("{what}: {inner}")
            } else {
                format!("{what}: `{path}`: {inner}")
            })
        }
    })
}
