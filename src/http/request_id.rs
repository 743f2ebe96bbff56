//! `x-request-id`: taken from the request (when it is a sane token) or generated, returned
//! on the response, and carried by a tracing span so every log line of the request has it.

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// Header carrying the request id.
pub const HEADER: &str = "x-request-id";

fn acceptable(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic())
}

/// Wraps every request in a `request` span with its id, and logs failures.
pub async fn middleware(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let span =
        tracing::info_span!("request", id = %id, method = %req.method(), path = %req.uri().path());
    let start = Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    let status = resp.status().as_u16();
    let ms = start.elapsed().as_secs_f64() * 1e3;
    span.in_scope(|| {
        if status >= 500 {
            tracing::error!(status, ms, "request failed");
        } else if status >= 400 {
            tracing::warn!(status, ms, "request refused");
        } else {
            tracing::debug!(status, ms, "request served");
        }
    });
    resp.headers_mut().insert(
        HEADER,
        HeaderValue::from_str(&id).expect("ids are visible ASCII"),
    );
    resp
}
