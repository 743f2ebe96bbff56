//! The one way to serve: `run(listener, config, shutdown)`. It listens at once, loads the
//! model in the background (`/health` 200 and `/ready` 503 meanwhile), then serves. On
//! shutdown it drains: `/ready` turns 503, new generation requests get 503, in-flight
//! ones finish until the engine signals it is idle or `--shutdown-grace` runs out; then
//! open streams get an error chunk and every connection is closed within a second
//! (docs/ARCHITECTURE.md, "Start-up and shutdown").

use std::future::Future;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sluice_engine::checkpoint::{self, Signature};
use sluice_engine::{EngineHandle, LoadOptions, Loaded, Metrics, warm_up};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::config::Config;
use crate::error::{ApiError, HttpError};
use crate::http::{self, AppState};

/// How long connections may stay open after the grace period before they are dropped.
const CLOSE_AFTER_GRACE: Duration = Duration::from_millis(500);

/// Loads a model file: the same call, and so the same error, for `sluice serve` and
/// `sluice generate`.
pub fn load_model(path: &Path, options: &LoadOptions) -> anyhow::Result<Loaded> {
    sluice_engine::load(path, options).with_context(|| {
        let hint = if path == crate::config::default_model_path() {
            " (run scripts/fetch-model to fetch the default model)"
        } else {
            ""
        };
        format!("loading {}{hint}", path.display())
    })
}

/// Loads the model, starts the engine and builds the handlers' state.
fn start(config: &Config) -> anyhow::Result<AppState> {
    let Loaded {
        model,
        tokenizer,
        file,
    } = load_model(&config.model.path, &config.model.load)?;
    let mut config = config.clone();
    config.fit_to_model(model.shape().train_context);
    let config = &config;
    tracing::info!(
        context = config.engine.context,
        kv_cache_tokens = config.engine.kv_tokens(),
        slots = config.engine.slots,
        "KV pool"
    );
    warm_up(&*model);
    let draft = match &config.model.draft {
        Some(path) => Some(load_draft(path, &config.model.load, &*model, &tokenizer)?),
        None => None,
    };
    let tokenizer = Arc::new(tokenizer);
    let metrics = Arc::new(Metrics::new(config.engine.slots, &config.model.name));
    let admin = match &config.admin {
        Some(a) => {
            let current = checkpoint::describe(&config.model.path, &config.engine.weights_version)
                .with_context(|| format!("reading {}", config.model.path.display()))?;
            let signature = Signature::of(&file, config.model.load.quantize)?;
            Some(Arc::new(http::admin::Admin::new(
                a.token.clone(),
                &a.reload_dirs,
                current,
                signature,
            )))
        }
        None => None,
    };
    let engine = EngineHandle::start_with_draft(
        model,
        draft,
        tokenizer.clone(),
        config.engine.clone(),
        metrics,
    );
    let mut state = AppState::new(engine, tokenizer, &config.model.name, config.limits.clone());
    state.api_keys = Arc::new(config.http.api_keys.clone());
    state.cors_origins = Arc::new(config.http.cors_origins.clone());
    state.tool_parser = config.http.tool_parser;
    state.model_bytes = bytes_of(&config.model.path);
    state.rerank = match config.http.rerank {
        false => None,
        true => match (state.tokenizer.id("yes"), state.tokenizer.id("no")) {
            (Some(yes), Some(no)) => Some((yes, no)),
            _ => anyhow::bail!("--rerank: the vocabulary has no `yes` and `no` tokens"),
        },
    };
    state.pooling = config
        .http
        .pooling
        .or_else(|| sluice_engine::Pooling::of_file(&file));
    state.ui = config.http.ui;
    state.admin = admin;
    Ok(state)
}

/// Bytes of a model file, or of the files of a folder (0 if unreadable).
fn bytes_of(path: &Path) -> u64 {
    match std::fs::read_dir(path) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum(),
        Err(_) => std::fs::metadata(path).map_or(0, |m| m.len()),
    }
}

/// Loads the draft model at `path` and checks that it speaks the model's vocabulary (the
/// same tokens, byte for byte, in the same order): its drafts are token ids.
fn load_draft(
    path: &Path,
    options: &LoadOptions,
    model: &dyn sluice_engine::Model,
    tokenizer: &sluice_engine::tokenizer::Tokenizer,
) -> anyhow::Result<Box<dyn sluice_engine::Model>> {
    let options = LoadOptions {
        quantize: options.quantize,
        ..Default::default()
    };
    let draft = load_model(path, &options).context("--draft-model")?;
    let (ours, theirs) = (model.shape().vocab, draft.model.shape().vocab);
    if ours != theirs || tokenizer.token_bytes() != draft.tokenizer.token_bytes() {
        anyhow::bail!(
            "--draft-model {}: its vocabulary ({theirs} tokens) is not the model's ({ours} \
             tokens): a draft model must share the model's tokenizer",
            path.display()
        );
    }
    tracing::info!(path = %path.display(), "draft model");
    warm_up(&*draft.model);
    Ok(draft.model)
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

/// As [`run`], calling `on_ready` with the handlers' state once the model is loaded and
/// warm (tests use it to watch the engine).
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
    let failure: Arc<Mutex<Option<anyhow::Error>>> = Arc::default();
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
    {
        let (app, failure, config) = (app.clone(), failure.clone(), config.clone());
        tokio::task::spawn_blocking(move || match start(&config) {
            Ok(state) => {
                tracing::info!(model = %config.model.name, "model loaded and warm, ready");
                let router = http::router(state.clone(), config.http.max_body_bytes);
                let _ = app.set((router, state.clone()));
                on_ready(&state);
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
            _ = state.engine.idle() => tracing::info!("drained"),
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
