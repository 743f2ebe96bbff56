//! The production serving path: listen at once, load the model in the background (with
//! `/health` 200 and `/ready` 503 meanwhile), then serve; on shutdown, drain before exit.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tower::ServiceExt;

use crate::config::ServeConfig;
use crate::error::ApiError;
use crate::http::{self, AppState};

/// What the server answers before the model is loaded.
fn loading(path: &str) -> Response {
    match path {
        "/health" => axum::Json(json!({"status": "loading"})).into_response(),
        "/ready" => ApiError::unavailable("not ready: loading the model").into_response(),
        _ => ApiError::unavailable("the model is still loading; retry shortly").into_response(),
    }
}

/// Runs one token through the engine so the first client does not pay for cold caches
/// and so readiness means the whole path works.
fn warm_up(state: AppState) -> anyhow::Result<AppState> {
    let mut req = crate::engine::ValidRequest::greedy(vec![0], 1);
    req.route = "warmup";
    let mut rx = state
        .engine
        .submit(req)
        .map_err(|e| anyhow::anyhow!("warm-up: {e}"))?;
    loop {
        match rx.blocking_recv() {
            Some(crate::engine::Event::Done(_)) => return Ok(state),
            Some(crate::engine::Event::Error(e)) => anyhow::bail!("warm-up: {e}"),
            Some(_) => {}
            None => anyhow::bail!("warm-up: the engine stopped"),
        }
    }
}

/// Serves on `listener` until `shutdown` completes, loading the model meanwhile. After the
/// signal, `/ready` answers 503 and new generation requests are refused while in-flight
/// ones finish, for at most `cfg.shutdown_grace` seconds.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cfg: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app: Arc<OnceLock<(Router, AppState)>> = Arc::new(OnceLock::new());
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
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    {
        let app = app.clone();
        let cfg = cfg.clone();
        tokio::task::spawn_blocking(move || match crate::start(&cfg).and_then(warm_up) {
            Ok(state) => {
                tracing::info!(model = %cfg.model_name(), "model loaded and warm, ready");
                let router = http::router(state.clone(), cfg.max_body_bytes);
                let _ = app.set((router, state));
            }
            Err(e) => {
                let _ = failed_tx.send(e);
            }
        });
    }
    let grace = Duration::from_secs_f64(cfg.shutdown_grace);
    let drain_app = app.clone();
    let stop = async move {
        tokio::select! {
            _ = shutdown => {}
            Ok(_) = failed_rx => return,
        }
        let Some((_, state)) = drain_app.get() else {
            return;
        };
        state.draining.store(true, Ordering::SeqCst);
        tracing::info!(grace_s = grace.as_secs_f64(), "draining");
        let start = Instant::now();
        while (state.engine.running() > 0 || state.engine.waiting() > 0) && start.elapsed() < grace
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    axum::serve(listener, gate)
        .with_graceful_shutdown(stop)
        .await?;
    if app.get().is_none() {
        anyhow::bail!("the model could not be loaded (see the log above)");
    }
    Ok(())
}
