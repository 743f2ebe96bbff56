//! A JSON body extractor whose every failure is an OpenAI-shaped error: malformed JSON and
//! wrong field types are 400s naming the field, an oversized body is 413, whatever the
//! request's content type says (curl's `-d` sends form encoding by default).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::error::{ApiError, HttpError};

/// A deserialised JSON body.
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes =
            Bytes::from_request(req, state)
                .await
                .map_err(|e| match e.status().as_u16() {
                    413 => HttpError::BodyTooLarge,
                    _ => HttpError::UnreadableBody(e.body_text()),
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
        if inner.is_syntax() || inner.is_eof() {
            return HttpError::Json {
                param: None,
                message: format!("malformed JSON body: {inner}"),
            }
            .into();
        }
        let field = Some(path)
            .filter(|p| p != "." && !p.is_empty())
            .or_else(|| blame::<T>(bytes));
        let message = match &field {
            Some(f) => format!("invalid request body: `{f}`: {inner}"),
            None => format!("invalid request body: {inner}"),
        };
        HttpError::Json {
            param: field,
            message,
        }
        .into()
    })
}

/// Most keys `blame` tries: each try re-reads the body, so the cap keeps the error path
/// linear in the body size.
const BLAME_KEYS: usize = 16;

/// Finds the top-level field at fault when serde could not say (fields inside
/// `#[serde(flatten)]` lose their path): the one whose removal fixes the body or turns the
/// error into "missing field" for that very field. Runs only on the error path, and only
/// for bodies with at most `BLAME_KEYS` keys.
fn blame<T: DeserializeOwned>(bytes: &[u8]) -> Option<String> {
    let serde_json::Value::Object(map) = serde_json::from_slice(bytes).ok()? else {
        return None;
    };
    if map.len() > BLAME_KEYS {
        return None;
    }
    let without = |k: &String| {
        let mut m = map.clone();
        m.remove(k);
        serde_json::from_value::<T>(serde_json::Value::Object(m))
    };
    // A key whose removal fixes the body is the culprit; failing that, a required key
    // whose value has the wrong type (its removal only makes it missing).
    map.keys()
        .find(|k| without(k).is_ok())
        .or_else(|| {
            map.keys().find(|k| {
                without(k)
                    .is_err_and(|e| e.to_string().starts_with(&format!("missing field `{k}`")))
            })
        })
        .cloned()
}
