//! `ApiError`: the one place where failures become HTTP statuses and OpenAI's error body
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::engine::SubmitError;
use crate::engine::model::ModelError;

/// An error returned to an API client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Human-readable message.
    pub message: String,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// A short machine-readable code.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 naming the field at fault.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.to_string()),
            code: Some("invalid_value"),
        }
    }

    /// 400 without a single field to blame.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// 404 for a model id we do not serve.
    pub fn model_not_found(model: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist."),
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    /// 404 for an unknown route.
    pub fn route_not_found(path: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: format!("No route for {path}"),
            param: None,
            code: Some("not_found"),
        }
    }

    /// 401: missing or wrong credentials.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    /// 403 for a value the server will not act on.
    pub fn forbidden(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::FORBIDDEN,
            message: message.into(),
            param: Some(param.into()),
            code: Some("forbidden"),
        }
    }

    /// 404 for a named thing that does not exist.
    pub fn not_found(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            param: Some(param.into()),
            code: Some("not_found"),
        }
    }

    /// 409: the resource is busy with another operation.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::CONFLICT,
            message: message.into(),
            param: None,
            code: Some("conflict"),
        }
    }

    /// 422: well-formed, but not usable (an incompatible checkpoint).
    pub fn incompatible(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: message.into(),
            param: Some(param.into()),
            code: Some("incompatible_checkpoint"),
        }
    }

    /// 504: the request ran past `--request-timeout`.
    pub fn timeout(seconds: f64) -> Self {
        Self {
            status: StatusCode::GATEWAY_TIMEOUT,
            message: format!("the request did not finish within the server's {seconds} s timeout"),
            param: None,
            code: Some("timeout"),
        }
    }

    /// 500 for a bug.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            param: None,
            code: Some("internal_error"),
        }
    }

    /// 503 while the engine is unavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            param: None,
            code: Some("unavailable"),
        }
    }

    /// OpenAI's `type` for the status.
    pub fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            400 | 404 | 405 | 413 | 415 | 422 => "invalid_request_error",
            401 | 403 => "authentication_error",
            409 => "conflict_error",
            429 => "rate_limit_error",
            503 => "service_unavailable_error",
            504 => "timeout_error",
            _ => "server_error",
        }
    }

    /// The JSON body (also used as an SSE error chunk).
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::SERVICE_UNAVAILABLE
        {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let message = e.to_string();
        match e {
            SubmitError::QueueFull(_) => Self {
                status: StatusCode::TOO_MANY_REQUESTS,
                message,
                param: None,
                code: Some("queue_full"),
            },
            SubmitError::QueuedTokens(_) => Self {
                status: StatusCode::TOO_MANY_REQUESTS,
                message,
                param: None,
                code: Some("queue_full"),
            },
            SubmitError::Limit { param, .. } => Self {
                status: StatusCode::BAD_REQUEST,
                message,
                param: Some(param.into()),
                code: Some("limit_exceeded"),
            },
            SubmitError::TooLong { .. } => Self {
                status: StatusCode::BAD_REQUEST,
                message,
                param: Some("max_tokens".into()),
                code: Some("context_length_exceeded"),
            },
            SubmitError::EmptyPrompt => Self::invalid("prompt", message),
            SubmitError::EngineDown => Self::unavailable(message),
        }
    }
}

impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> Self {
        Self::bad_request(e.to_string())
    }
}
