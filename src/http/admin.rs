//! The admin API: `POST /admin/reload` swaps in new weights without a restart,
//! `GET /admin/weights` describes the weights in use (docs/ARCHITECTURE.md, "Weight
//! reload"). Mounted only when an admin token is configured; every request needs
//! `Authorization: Bearer <token>`. Each model has its own record; a request names its
//! model (`model` in the body, `?model=` on `GET`), the default model when it does not.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use sluice_engine::checkpoint::{self, Checkpoint, CheckpointError, ResolveError, Signature};
use tracing::{info, warn};

use super::auth::{bearer, same};
use super::json::Json;
use super::{AppState, ServerState};
use crate::api::ModelQuery;
use crate::api::admin::{ReloadRequest, ReloadResponse, WeightsInfo};
use crate::error::{ApiError, HttpError, ReloadError};

/// One model's reload directories and record of loaded checkpoints.
pub struct Admin {
    roots: Vec<PathBuf>,
    busy: Arc<tokio::sync::Mutex<()>>,
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
    pub fn new(roots: &[PathBuf], current: Checkpoint, signature: Signature) -> Self {
        let roots = roots.iter().filter_map(|r| r.canonicalize().ok()).collect();
        Self {
            roots,
            busy: Arc::new(tokio::sync::Mutex::new(())),
            record: Mutex::new(Record {
                current,
                previous: None,
                signature,
                reloads: 0,
            }),
        }
    }
}

/// The admin routes, behind the bearer-token check.
pub fn routes(state: ServerState) -> Router<ServerState> {
    Router::new()
        .route("/admin/reload", post(reload))
        .route("/admin/weights", get(weights))
        .route_layer(axum::middleware::from_fn_with_state(state, auth))
}

async fn auth(
    State(s): State<ServerState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let token = s
        .admin_token
        .as_ref()
        .ok_or_else(|| HttpError::RouteNotFound(req.uri().path().to_string()))?;
    if !same(bearer(&req).as_bytes(), token.as_bytes()) {
        return Err(HttpError::Unauthorized("missing or wrong admin token").into());
    }
    Ok(next.run(req).await)
}

fn admin(s: &AppState) -> Result<&Arc<Admin>, ApiError> {
    s.admin
        .as_ref()
        .ok_or_else(|| HttpError::RouteNotFound("/admin".into()).into())
}

/// Describes the weights in use and the ones they replaced.
#[utoipa::path(
    get,
    path = "/admin/weights",
    tag = "admin",
    security(("admin_token" = [])),
    params(ModelQuery),
    responses(
        (status = 200, body = WeightsInfo),
        (status = 401, body = crate::api::ErrorResponse),
        (status = 404, body = crate::api::ErrorResponse),
    )
)]
pub async fn weights(
    State(server): State<ServerState>,
    Query(q): Query<ModelQuery>,
) -> Result<axum::Json<WeightsInfo>, ApiError> {
    let s = server.model(q.model.as_deref()).await?;
    let admin = admin(&s)?;
    let reloading = admin.busy.try_lock().is_err();
    let r = admin.record.lock().unwrap_or_else(|e| e.into_inner());
    Ok(axum::Json(WeightsInfo {
        model: s.model_name.to_string(),
        current: r.current.clone().into(),
        previous: r.previous.clone().map(Into::into),
        reloading,
        swap_pending: s.engine.swap_pending(),
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
        (status = 400, description = "Bad request body or version", body = crate::api::ErrorResponse),
        (status = 401, description = "Missing or wrong admin token", body = crate::api::ErrorResponse),
        (status = 403, description = "Path outside the model directories", body = crate::api::ErrorResponse),
        (status = 404, description = "No such file, or no such model", body = crate::api::ErrorResponse),
        (status = 409, description = "Another reload is in progress", body = crate::api::ErrorResponse),
        (status = 422, description = "Not a compatible checkpoint (first mismatch named)", body = crate::api::ErrorResponse),
        (status = 503, description = "Engine down", body = crate::api::ErrorResponse),
    )
)]
pub async fn reload(
    State(server): State<ServerState>,
    Json(req): Json<ReloadRequest>,
) -> Result<axum::Json<ReloadResponse>, ApiError> {
    let s = server.model(req.model.as_deref()).await?;
    let reloads = s.engine.metrics().reloads.clone();
    let outcome = move |o: &str| reloads.with_label_values(&[o]).inc();
    let admin = admin(&s)?.clone();
    let Ok(busy) = admin.busy.clone().try_lock_owned() else {
        outcome("conflict");
        return Err(ReloadError::InProgress.into());
    };
    // The reload runs as a task of its own, which holds the lock and keeps the record:
    // an admin client that goes away mid-reload changes nothing (the swap completes, the
    // record follows it, the old weights are freed off the engine thread, and a second
    // reload meanwhile gets 409).
    let task = tokio::spawn(async move {
        let _busy = busy;
        let outcome = outcome;
        let result = run_reload(&s, &admin, req).await.map_err(ApiError::from);
        if let Ok((_, path)) = &result {
            server.models.moved(&s.model_name, path.clone());
        }
        let result = result.map(|(r, _)| r);
        match &result {
            Ok(r) => {
                outcome("success");
                info!(version = %r.weights.version, pause_ms = r.pause_ms, waited_ms = r.waited_ms, "weights reloaded");
            }
            Err(e) => {
                outcome("refused");
                warn!(status = e.status().as_u16(), error = %e, "reload refused");
            }
        }
        result
    });
    match task.await {
        Ok(result) => result.map(axum::Json),
        Err(e) => Err(HttpError::Internal(format!("the reload task failed: {e}")).into()),
    }
}

async fn run_reload(
    s: &AppState,
    admin: &Arc<Admin>,
    req: ReloadRequest,
) -> Result<(ReloadResponse, PathBuf), ReloadError> {
    let (signature, previous, n) = {
        let r = admin.record.lock().unwrap_or_else(|e| e.into_inner());
        (r.signature.clone(), r.current.clone(), r.reloads)
    };
    let version = req.version.unwrap_or_else(|| format!("v{}", n + 2));
    if version.is_empty() || version.len() > 64 || !version.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ReloadError::Invalid {
            param: "version",
            message: "version must be 1-64 visible ASCII characters".into(),
        });
    }
    let path = checkpoint::resolve(&admin.roots, &req.path).map_err(|e| match e {
        ResolveError::Missing(m) => ReloadError::Missing(m),
        ResolveError::Outside(m) => ReloadError::Outside(m),
    })?;
    let (v, p) = (version.clone(), path.clone());
    let (model, info) = super::off_thread(move || checkpoint::prepare(&p, &signature, &v))
        .await
        .map_err(|e| match e {
            CheckpointError::Unreadable(m) => ReloadError::Invalid {
                param: "path",
                message: m,
            },
            CheckpointError::Incompatible(m) => ReloadError::Incompatible(m),
        })?;
    let mode = req.mode.into();
    let rx = s
        .engine
        .reload(model, version, mode)
        .map_err(ReloadError::Busy)?;
    let swapped = rx.await.map_err(|_| ReloadError::EngineStopped)?;
    let (pause, waited, aborted) = (swapped.pause, swapped.waited, swapped.aborted);
    // The old weights are freed off the engine thread and the async workers, and their
    // memory handed back to the system.
    tokio::task::spawn_blocking(move || {
        drop(swapped.old);
        sluice_engine::return_freed_memory();
    });
    {
        let mut r = admin.record.lock().unwrap_or_else(|e| e.into_inner());
        r.previous = Some(std::mem::replace(&mut r.current, info.clone()));
        r.reloads += 1;
    }
    let response = ReloadResponse {
        weights: info.into(),
        previous_version: previous.version,
        mode: req.mode,
        pause_ms: pause.as_secs_f64() * 1e3,
        waited_ms: waited.as_secs_f64() * 1e3,
        aborted,
    };
    Ok((response, path))
}
