//! `GET /health` (liveness), `GET /ready` (readiness) and `GET /metrics` (Prometheus).

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::ServerState;
#[allow(unused_imports)]
use crate::api::{ErrorResponse, Status};
use crate::error::{ApiError, HttpError};

/// Liveness: 200 while every loaded model's engine thread runs, 503 once one has died.
#[utoipa::path(get, path = "/health", tag = "operations", responses((status = 200, body = Status), (status = 503, body = ErrorResponse)))]
pub async fn health(State(s): State<ServerState>) -> Response {
    if all_alive(&s) {
        axum::Json(json!({"status": "ok"})).into_response()
    } else {
        ApiError::from(sluice_engine::EngineError::Died).into_response()
    }
}

fn all_alive(s: &ServerState) -> bool {
    s.models
        .statuses()
        .iter()
        .filter_map(|(_, _, state)| state.as_ref())
        .all(|state| state.engine.is_alive())
}

/// Readiness: 200 when requests can be served (the default model loaded at start, no
/// engine dead, not draining), else 503.
#[utoipa::path(get, path = "/ready", tag = "operations", responses((status = 200, body = Status), (status = 503, body = ErrorResponse)))]
pub async fn ready(State(s): State<ServerState>) -> Response {
    if !all_alive(&s) {
        return ApiError::from(HttpError::NotReady("the engine thread has stopped"))
            .into_response();
    }
    if s.models.default_failed() {
        return ApiError::from(HttpError::NotReady("the default model failed to load"))
            .into_response();
    }
    if s.draining.load(Ordering::SeqCst) {
        return ApiError::from(HttpError::NotReady("the server is shutting down")).into_response();
    }
    axum::Json(json!({"status": "ready"})).into_response()
}

/// Every metric in Prometheus' text format: the server's, then every model's engine
/// metrics (each series labelled `model`).
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(s): State<ServerState>) -> Response {
    let models = s.models.metrics();
    let mut registries = vec![&s.registry];
    registries.extend(models.iter().map(|m| m.registry()));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        sluice_engine::render_metrics(&registries),
    )
        .into_response()
}

/// Routes that serve the platform, not users: probes and scrapes. They are not counted,
/// so a dashboard's request rates and latencies are the users' alone.
const INTERNAL: &[&str] = &["/health", "/ready", "/metrics"];

/// Counts every routed request but the internal ones by route and status, and times it
/// to its headers.
pub async fn track(State(s): State<ServerState>, req: Request, next: Next) -> Response {
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
