//! `ApiError`: every layer's error enum joined into one, and the one table that maps each
//! to an HTTP status, OpenAI's error `type` and `code`, written as
//! `{"error": {"message", "type", "param", "code"}}` (docs/ARCHITECTURE.md, "Errors").

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sluice_engine::{EngineError, SubmitError, TokenizerError};

use crate::validation::ValidationError;

/// Failures of the HTTP layer itself.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HttpError {
    /// No such route.
    #[error("No route for {0}")]
    RouteNotFound(String),
    /// Missing or wrong credentials.
    #[error("{0}")]
    Unauthorized(&'static str),
    /// The body is larger than `--max-body-bytes`.
    #[error("the request body is larger than the server's limit")]
    BodyTooLarge,
    /// The body could not be read.
    #[error("{0}")]
    UnreadableBody(String),
    /// The body did not arrive within `--body-read-timeout`.
    #[error("the request body did not arrive within the server's body read timeout")]
    BodyTimeout,
    /// The body is not the JSON the route takes; `param` names the field when known.
    #[error("{message}")]
    Json {
        /// The field at fault.
        param: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The model is still loading.
    #[error("the model is still loading; retry shortly")]
    Loading,
    /// A model asked for failed to load (it stays failed until the server restarts).
    #[error("model `{model}` could not be loaded: {error}")]
    ModelFailed {
        /// The model's id.
        model: String,
        /// Why.
        error: String,
    },
    /// A model asked for could not be loaded in time (every loaded model stayed busy, or
    /// loading took longer than the request timeout).
    #[error("model `{0}` could not be loaded within the request timeout: {1}")]
    ModelWait(String, &'static str),
    /// Not ready, for the reason given.
    #[error("not ready: {0}")]
    NotReady(&'static str),
    /// The server is shutting down.
    #[error("the server is shutting down")]
    Draining,
    /// A handler panicked (a bug; logged).
    #[error("internal error while handling the request")]
    Panicked,
    /// A blocking task could not finish (a bug; logged).
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a reload was refused; the old weights keep serving.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReloadError {
    /// A field of the request.
    #[error("{message}")]
    Invalid {
        /// The field.
        param: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The path does not exist.
    #[error("{0}")]
    Missing(String),
    /// The path resolves outside every reload directory.
    #[error("{0}")]
    Outside(String),
    /// The file cannot replace the running model (the first mismatch named).
    #[error("{0}")]
    Incompatible(String),
    /// Another reload is in progress.
    #[error("another reload is in progress")]
    InProgress,
    /// The engine's command queue is full or the engine is down.
    #[error(transparent)]
    Busy(SubmitError),
    /// The engine stopped before swapping.
    #[error("the engine stopped before swapping")]
    EngineStopped,
}

/// An error returned to an API client.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request's fields.
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// The engine refused the submission.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The engine ended the request early.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The prompt or conversation cannot be tokenised or rendered.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A weight reload was refused.
    #[error(transparent)]
    Reload(#[from] ReloadError),
    /// The HTTP layer.
    #[error(transparent)]
    Http(#[from] HttpError),
}

/// One row of the table: status, `code` and `param`.
struct Row {
    status: StatusCode,
    code: &'static str,
    param: Option<String>,
}

fn row(status: StatusCode, code: &'static str, param: Option<&str>) -> Row {
    Row {
        status,
        code,
        param: param.map(str::to_string),
    }
}

impl ApiError {
    /// The table: every error kind's status, `code` and `param`.
    fn row(&self) -> Row {
        use StatusCode as S;
        match self {
            ApiError::Validation(e) => match e {
                ValidationError::Invalid { param, .. } => {
                    row(S::BAD_REQUEST, "invalid_value", Some(param))
                }
                ValidationError::Limit { param, .. } => {
                    row(S::BAD_REQUEST, "limit_exceeded", Some(param))
                }
                ValidationError::ContextLength { param, .. } => {
                    row(S::BAD_REQUEST, "context_length_exceeded", Some(param))
                }
                ValidationError::ModelNotFound(_) => {
                    row(S::NOT_FOUND, "model_not_found", Some("model"))
                }
                ValidationError::Tokenizer(t) => ApiError::Tokenizer(t.clone()).row(),
            },
            ApiError::Submit(e) => match e {
                SubmitError::QueueFull(_) | SubmitError::QueuedTokens(_) => {
                    row(S::TOO_MANY_REQUESTS, "queue_full", None)
                }
                SubmitError::TooLong { .. } => row(
                    S::BAD_REQUEST,
                    "context_length_exceeded",
                    Some("max_tokens"),
                ),
                SubmitError::Empty => row(S::BAD_REQUEST, "invalid_value", Some("prompt")),
                SubmitError::EngineDown => row(S::SERVICE_UNAVAILABLE, "unavailable", None),
            },
            ApiError::Engine(e) => match e {
                EngineError::TimedOut(_) => row(S::GATEWAY_TIMEOUT, "timeout", None),
                EngineError::Aborted => row(S::SERVICE_UNAVAILABLE, "aborted_by_reload", None),
                EngineError::ShuttingDown => row(S::SERVICE_UNAVAILABLE, "shutting_down", None),
                EngineError::Died => row(S::SERVICE_UNAVAILABLE, "engine_failed", None),
                EngineError::Grammar(_) => row(S::INTERNAL_SERVER_ERROR, "grammar_failed", None),
            },
            ApiError::Tokenizer(e) => match e {
                TokenizerError::NoChatTemplate | TokenizerError::Template(_) => {
                    row(S::BAD_REQUEST, "invalid_value", Some("messages"))
                }
                TokenizerError::Encode(_) => row(S::BAD_REQUEST, "invalid_value", Some("prompt")),
                TokenizerError::Decode(_) => row(S::BAD_REQUEST, "invalid_value", Some("tokens")),
                TokenizerError::File { .. }
                | TokenizerError::Vocab(_)
                | TokenizerError::TemplateSyntax(_) => {
                    row(S::INTERNAL_SERVER_ERROR, "internal_error", None)
                }
            },
            ApiError::Reload(e) => match e {
                ReloadError::Invalid { param, .. } => {
                    row(S::BAD_REQUEST, "invalid_value", Some(param))
                }
                ReloadError::Missing(_) => row(S::NOT_FOUND, "not_found", Some("path")),
                ReloadError::Outside(_) => row(S::FORBIDDEN, "forbidden", Some("path")),
                ReloadError::Incompatible(_) => row(
                    S::UNPROCESSABLE_ENTITY,
                    "incompatible_checkpoint",
                    Some("path"),
                ),
                ReloadError::InProgress => row(S::CONFLICT, "conflict", None),
                ReloadError::Busy(e) => ApiError::Submit(e.clone()).row(),
                ReloadError::EngineStopped => row(S::SERVICE_UNAVAILABLE, "unavailable", None),
            },
            ApiError::Http(e) => match e {
                HttpError::RouteNotFound(_) => row(S::NOT_FOUND, "not_found", None),
                HttpError::Unauthorized(_) => row(S::UNAUTHORIZED, "invalid_api_key", None),
                HttpError::BodyTooLarge => row(S::PAYLOAD_TOO_LARGE, "body_too_large", None),
                HttpError::UnreadableBody(_) => row(S::BAD_REQUEST, "invalid_body", None),
                HttpError::BodyTimeout => row(S::REQUEST_TIMEOUT, "request_timeout", None),
                HttpError::Json { param, .. } => Row {
                    status: S::BAD_REQUEST,
                    code: "invalid_body",
                    param: param.clone(),
                },
                HttpError::Loading | HttpError::NotReady(_) | HttpError::Draining => {
                    row(S::SERVICE_UNAVAILABLE, "unavailable", None)
                }
                HttpError::ModelFailed { .. } => {
                    row(S::INTERNAL_SERVER_ERROR, "model_load_failed", Some("model"))
                }
                HttpError::ModelWait(..) => row(S::SERVICE_UNAVAILABLE, "model_loading", None),
                HttpError::Panicked | HttpError::Internal(_) => {
                    row(S::INTERNAL_SERVER_ERROR, "internal_error", None)
                }
            },
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.row().status
    }

    /// OpenAI's `type` for the status.
    pub fn kind(&self) -> &'static str {
        match self.status().as_u16() {
            400 | 404 | 405 | 408 | 413 | 415 | 422 => "invalid_request_error",
            401 | 403 => "authentication_error",
            409 => "conflict_error",
            429 => "rate_limit_error",
            503 => "service_unavailable_error",
            504 => "timeout_error",
            _ => "server_error",
        }
    }

    /// The JSON body (also sent as an SSE error chunk).
    pub fn body(&self) -> serde_json::Value {
        let r = self.row();
        json!({"error": {
            "message": self.to_string(),
            "type": self.kind(),
            "param": r.param,
            "code": r.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut resp = (status, axum::Json(self.body())).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_failures_keep_their_kind() {
        let s = |e: ApiError| e.status().as_u16();
        assert_eq!(s(EngineError::TimedOut(1.0).into()), 504);
        assert_eq!(s(EngineError::Aborted.into()), 503);
        assert_eq!(s(EngineError::Died.into()), 503);
        assert_eq!(s(SubmitError::QueueFull(1).into()), 429);
        assert_eq!(s(TokenizerError::NoChatTemplate.into()), 400);
        assert_eq!(s(TokenizerError::Vocab("x".into()).into()), 500);
        let b = ApiError::from(ValidationError::invalid("n", "bad n")).body();
        assert_eq!(b["error"]["param"], "n");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(b["error"]["message"], "bad n");
    }
}
