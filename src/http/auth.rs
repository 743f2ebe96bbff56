//! Bearer-token checks: API keys on the OpenAI, Anthropic and tokenizer routes (when
//! configured; Anthropic's `x-api-key` header is taken like a bearer token),
//! the admin token on `/admin/*`. Tokens are compared in constant time.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

use super::ServerState;
use crate::error::{ApiError, HttpError};

/// Compares in time independent of where the inputs differ.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The bearer token of a request, if any.
pub fn bearer(req: &Request) -> &str {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

/// The API key of a request: its bearer token, else Anthropic's `x-api-key` header.
pub fn api_key_of(req: &Request) -> &str {
    match bearer(req) {
        "" => req
            .headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
        key => key,
    }
}

/// Requires one of the configured API keys (no keys configured: open).
pub async fn api_key(
    State(s): State<ServerState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if !s.api_keys.is_empty() {
        let given = api_key_of(&req).as_bytes();
        // Every key is compared, so the time does not tell which one nearly matched.
        let ok = s
            .api_keys
            .iter()
            .fold(false, |ok, k| same(given, k.as_bytes()) | ok);
        if !ok {
            return Err(HttpError::Unauthorized(
                "missing or invalid API key: send Authorization: Bearer <key> (or x-api-key: <key>)",
            )
            .into());
        }
    }
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn token_comparison() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
