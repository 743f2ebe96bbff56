//! The one way to serve: `run(listener, config, shutdown)`. It listens at once, loads the
//! models loaded at start in the background (`/health` 200 and `/ready` 503 meanwhile),
//! then serves. On
//! shutdown it drains: `/ready` turns 503, new generation requests get 503, in-flight
//! ones finish until the engine signals it is idle or `--shutdown-grace` runs out; then
//! open streams get an error chunk and every connection is closed within a second
//! (docs/ARCHITECTURE.md, "Start-up and shutdown").

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::config::Config;
use crate::error::{ApiError, HttpError};
use crate::http::models::Models;
use crate::http::{self, AppState, Common, ServerState};

/// How long connections may stay open after the grace period before they are dropped.
const CLOSE_AFTER_GRACE: Duration = Duration::from_millis(500);

/// The router's state: what all routes share, and the models, none loaded yet.
fn server_state(config: &Config) -> ServerState {
    let mut common = Common::new();
    common.api_keys = Arc::new(config.http.api_keys.clone());
    common.cors_origins = Arc::new(config.http.cors_origins.clone());
    common.admin_token = config.admin.as_ref().map(|a| a.token.as_str().into());
    common.ui = config.http.ui;
    ServerState {
        models: Arc::new(Models::new(config, common.clone())),
        common,
    }
}

/// What the server answers before the model is loaded.
fn loading(path: &str) -> Response {
    match path {
        "/health" => axum::Json(json!({"status": "loading"})).into_response(),
        "/ready" => ApiError::from(HttpError::NotReady("loading the model")).into_response(),
        _ => ApiError::from(HttpError::Loading).into_response(),
    }
}

/// Serves on `listener` until `shutdown` completes, then drains (see the module docs).
/// Fails with the reason when the model cannot be loaded.
pub async fn run(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with(listener, config, shutdown, |_| {}).await
}

/// As [`run`], calling `on_ready` with the default model's state once the models loaded
/// at start are loaded and warm (tests use it to watch the engine).
pub async fn run_with(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_ready: impl FnOnce(&AppState) + Send + 'static,
) -> anyhow::Result<()> {
    // A certificate that does not load stops the server before it answers anything.
    let tls = match &config.http.tls {
        Some(files) => Some(http::tls::Tls::new(files).map_err(anyhow::Error::msg)?),
        None => None,
    };
    if let Some(t) = &tls {
        t.watch();
    }
    let app: Arc<OnceLock<(Router, ServerState)>> = Arc::new(OnceLock::new());
    let gate = {
        let app = app.clone();
        Router::new().fallback(move |req: Request| {
            let app = app.clone();
            async move {
                match app.get() {
                    Some((router, _)) => router.clone().oneshot(req).await.into_response(),
                    None => loading(req.uri().path()),
                }
            }
        })
    };
    let failure: Arc<Mutex<Option<anyhow::Error>>> = Arc::default();
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
    {
        let (app, failure, config) = (app.clone(), failure.clone(), config.clone());
        let server = server_state(&config);
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || match server.models.preload() {
            Ok(()) => {
                tracing::info!(model = %config.model().name, "ready");
                runtime.spawn(server.models.clone().unload_idle());
                let router = http::router(server.clone(), config.http.max_body_bytes);
                let _ = app.set((router, server.clone()));
                if let Some(state) = server.models.default_loaded() {
                    on_ready(&state);
                }
            }
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "the model could not be loaded");
                *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                let _ = failed_tx.send(());
            }
        });
    }
    let grace = config.http.shutdown_grace;
    // When connections must be closed whatever they are doing: set once draining starts.
    let (close_tx, mut close_rx) = tokio::sync::watch::channel::<Option<Instant>>(None);
    let drain_app = app.clone();
    let stop = async move {
        tokio::select! {
            _ = shutdown => {}
            Ok(_) = failed_rx => return,
        }
        let end = Instant::now() + grace;
        let _ = close_tx.send(Some(end + CLOSE_AFTER_GRACE));
        let Some((_, state)) = drain_app.get() else {
            return;
        };
        state.draining.store(true, Ordering::SeqCst);
        tracing::info!(grace_s = grace.as_secs_f64(), "draining");
        tokio::select! {
            _ = state.models.idle_all() => tracing::info!("drained"),
            _ = tokio::time::sleep_until(end) => {
                tracing::warn!("grace period over: ending the requests still open");
                state.deadline.send_replace(true);
            }
        }
    };
    let serve = http::conn::serve(listener, gate, config.http.conn, tls, stop);
    let hard_stop = async move {
        let Ok(end) = close_rx
            .wait_for(Option::is_some)
            .await
            .map(|e| e.unwrap_or_else(Instant::now))
        else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(end).await;
    };
    tokio::select! {
        _ = serve => {}
        _ = hard_stop => tracing::warn!("closing the connections still open after the grace period"),
    }
    if let Some(e) = failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    Ok(())
}
