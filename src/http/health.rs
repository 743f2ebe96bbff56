//! `GET /health` (liveness), `GET /ready` (readiness) and `GET /metrics` (Prometheus).

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
#[allow(unused_imports)]
use crate::api::{ErrorResponse, Status};
use crate::error::{ApiError, HttpError};

/// Liveness: 200 while the engine thread runs, 503 once it has died.
#[utoipa::path(get, path = "/health", tag = "operations", responses((status = 200, body = Status), (status = 503, body = ErrorResponse)))]
pub async fn health(State(s): State<AppState>) -> Response {
    if s.engine.is_alive() {
        axum::Json(json!({"status": "ok"})).into_response()
    } else {
        ApiError::from(sluice_engine::EngineError::Died).into_response()
    }
}

/// Readiness: 200 when requests can be served (engine running, not draining), else 503.
#[utoipa::path(get, path = "/ready", tag = "operations", responses((status = 200, body = Status), (status = 503, body = ErrorResponse)))]
pub async fn ready(State(s): State<AppState>) -> Response {
    if !s.engine.is_alive() {
        return ApiError::from(HttpError::NotReady("the engine thread has stopped"))
            .into_response();
    }
    if s.draining.load(Ordering::SeqCst) {
        return ApiError::from(HttpError::NotReady("the server is shutting down")).into_response();
    }
    axum::Json(json!({"status": "ready"})).into_response()
}

/// Every metric in Prometheus' text format.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(s): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.engine.metrics().render(),
    )
        .into_response()
}

/// Routes that serve the platform, not users: probes and scrapes. They are not counted,
/// so a dashboard's request rates and latencies are the users' alone.
const INTERNAL: &[&str] = &["/health", "/ready", "/metrics"];

/// Counts every routed request but the internal ones by route and status, and times it
/// to its headers.
pub async fn track(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    if INTERNAL.contains(&route.as_str()) {
        return next.run(req).await;
    }
    let start = Instant::now();
    let resp = next.run(req).await;
    let m = &s.http_metrics;
    let status = resp.status();
    m.requests
        .with_label_values(&[&route, status.as_str()])
        .inc();
    m.duration
        .with_label_values(&[&route, status.as_str()])
        .observe(start.elapsed().as_secs_f64());
    resp
}
