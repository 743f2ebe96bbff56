//! The admin API (E20, E21): `POST /admin/reload` swaps in new weights without a restart,
//! `GET /admin/weights` describes the weights in use. Mounted only when an admin token is
//! configured; every request needs `Authorization: Bearer <token>`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::AppState;
use super::auth::{bearer, same};
use super::json::Json;
use crate::checkpoint::{self, Checkpoint, CheckpointError, ResolveError, Signature};
use crate::engine::ReloadMode;
use crate::error::ApiError;

/// Admin configuration and the record of loaded checkpoints.
pub struct Admin {
    token: String,
    roots: Vec<PathBuf>,
    busy: tokio::sync::Mutex<()>,
    record: Mutex<Record>,
}

struct Record {
    current: Checkpoint,
    previous: Option<Checkpoint>,
    signature: Signature,
    reloads: u64,
}

impl Admin {
    /// `roots` are the directories reload paths must resolve into.
    pub fn new(
        token: String,
        roots: &[PathBuf],
        current: Checkpoint,
        signature: Signature,
    ) -> Self {
        let roots = roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
        Self {
            token,
            roots,
            busy: tokio::sync::Mutex::new(()),
            record: Mutex::new(Record {
                current,
                previous: None,
                signature,
                reloads: 0,
            }),
        }
    }
}

/// Body of `POST /admin/reload`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReloadRequest {
    /// GGUF file to load, inside one of the `--model-dir` directories.
    #[schema(example = "/models/SmolLM2-135M-Instruct.Q4_1.gguf")]
    pub path: String,
    /// What happens to requests in flight (default `wait`).
    #[serde(default)]
    pub mode: ReloadMode,
    /// Label for the new weights (default `v<N>`), reported as `system_fingerprint`.
    pub version: Option<String>,
}

/// Result of a reload.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReloadResponse {
    /// The new weights.
    pub weights: Checkpoint,
    /// Version that was replaced.
    pub previous_version: String,
    /// Mode used.
    pub mode: ReloadMode,
    /// Milliseconds the engine paused between two steps to swap.
    pub pause_ms: f64,
    /// Milliseconds from the engine receiving the weights to the swap (in `wait` mode:
    /// in-flight requests finishing).
    pub waited_ms: f64,
    /// Requests ended by `abort`.
    pub aborted: usize,
}

/// Body of `GET /admin/weights`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WeightsInfo {
    /// The weights in use.
    pub current: Checkpoint,
    /// The weights they replaced, if any.
    pub previous: Option<Checkpoint>,
}

/// The admin routes, behind the bearer-token check.
pub fn routes(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/admin/reload", post(reload))
        .route("/admin/weights", get(weights))
        .route_layer(axum::middleware::from_fn_with_state(state, auth))
}

async fn auth(State(s): State<AppState>, req: Request, next: Next) -> Result<Response, ApiError> {
    let admin = s
        .admin
        .as_ref()
        .ok_or_else(|| ApiError::route_not_found(req.uri().path()))?;
    if !same(bearer(&req).as_bytes(), admin.token.as_bytes()) {
        return Err(ApiError::unauthorized("missing or wrong admin token"));
    }
    Ok(next.run(req).await)
}

fn admin(s: &AppState) -> Result<&Arc<Admin>, ApiError> {
    s.admin
        .as_ref()
        .ok_or_else(|| ApiError::route_not_found("/admin"))
}

/// Describes the weights in use and the ones they replaced.
#[utoipa::path(
    get,
    path = "/admin/weights",
    tag = "admin",
    security(("admin_token" = [])),
    responses((status = 200, body = WeightsInfo), (status = 401, body = crate::http::openai::types::ErrorResponse))
)]
pub async fn weights(State(s): State<AppState>) -> Result<axum::Json<WeightsInfo>, ApiError> {
    let r = admin(&s)?.record.lock().expect("admin record");
    Ok(axum::Json(WeightsInfo {
        current: r.current.clone(),
        previous: r.previous.clone(),
    }))
}

/// Loads a checkpoint off the engine thread, checks it against the running model and
/// swaps it in at a step boundary. Refusals leave the old weights serving.
#[utoipa::path(
    post,
    path = "/admin/reload",
    tag = "admin",
    security(("admin_token" = [])),
    request_body = ReloadRequest,
    responses(
        (status = 200, body = ReloadResponse),
        (status = 400, description = "Bad request body or version", body = crate::http::openai::types::ErrorResponse),
        (status = 401, description = "Missing or wrong admin token", body = crate::http::openai::types::ErrorResponse),
        (status = 403, description = "Path outside the model directories", body = crate::http::openai::types::ErrorResponse),
        (status = 404, description = "No such file", body = crate::http::openai::types::ErrorResponse),
        (status = 409, description = "Another reload is in progress", body = crate::http::openai::types::ErrorResponse),
        (status = 422, description = "Not a compatible checkpoint (first mismatch named)", body = crate::http::openai::types::ErrorResponse),
        (status = 503, description = "Engine down", body = crate::http::openai::types::ErrorResponse),
    )
)]
pub async fn reload(
    State(s): State<AppState>,
    Json(req): Json<ReloadRequest>,
) -> Result<axum::Json<ReloadResponse>, ApiError> {
    let outcome = |o: &str| s.engine.metrics().reloads.with_label_values(&[o]).inc();
    let admin = admin(&s)?.clone();
    let Ok(_busy) = admin.busy.try_lock() else {
        outcome("conflict");
        return Err(ApiError::conflict("another reload is in progress"));
    };
    let result = run_reload(&s, &admin, req).await;
    match &result {
        Ok(r) => {
            outcome("success");
            info!(version = %r.weights.version, pause_ms = r.pause_ms, waited_ms = r.waited_ms, "weights reloaded");
        }
        Err(e) => {
            outcome("refused");
            warn!(status = e.status.as_u16(), error = %e.message, "reload refused");
        }
    }
    result.map(axum::Json)
}

async fn run_reload(
    s: &AppState,
    admin: &Arc<Admin>,
    req: ReloadRequest,
) -> Result<ReloadResponse, ApiError> {
    let (signature, previous, n) = {
        let r = admin.record.lock().expect("admin record");
        (r.signature.clone(), r.current.clone(), r.reloads)
    };
    let version = req.version.unwrap_or_else(|| format!("v{}", n + 2));
    if version.is_empty() || version.len() > 64 || !version.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::invalid(
            "version",
            "version must be 1-64 visible ASCII characters",
        ));
    }
    let path = checkpoint::resolve(&admin.roots, &req.path).map_err(|e| match e {
        ResolveError::Missing(m) => ApiError::not_found("path", m),
        ResolveError::Outside(m) => ApiError::forbidden("path", m),
    })?;
    let v = version.clone();
    let (weights, info) =
        tokio::task::spawn_blocking(move || checkpoint::prepare(&path, &signature, &v))
            .await
            .map_err(|e| ApiError::internal(format!("loading the checkpoint: {e}")))?
            .map_err(|e| match e {
                CheckpointError::Unreadable(m) => ApiError::invalid("path", m),
                CheckpointError::Incompatible(m) => ApiError::incompatible("path", m),
            })?;
    let rx = s.engine.reload(weights, version, req.mode)?;
    let swapped = rx
        .await
        .map_err(|_| ApiError::unavailable("the engine stopped before swapping"))?;
    let (pause, waited, aborted) = (swapped.pause, swapped.waited, swapped.aborted);
    // The old weights are freed off the engine thread and the async workers.
    tokio::task::spawn_blocking(move || drop(swapped.old));
    {
        let mut r = admin.record.lock().expect("admin record");
        r.previous = Some(std::mem::replace(&mut r.current, info.clone()));
        r.reloads += 1;
    }
    Ok(ReloadResponse {
        weights: info,
        previous_version: previous.version,
        mode: req.mode,
        pause_ms: pause.as_secs_f64() * 1e3,
        waited_ms: waited.as_secs_f64() * 1e3,
        aborted,
    })
}
