//! sluice: an OpenAI-compatible LLM inference server with a static-shape engine.

pub mod checkpoint;
pub mod config;
pub mod engine;
pub mod error;
pub mod failpoint;
pub mod http;
pub mod metrics;
pub mod scheduler;
pub mod server;
pub mod tokenizer;
pub mod validation;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context;

use crate::config::ServeConfig;
use crate::engine::EngineHandle;
use crate::engine::model::{GgufFile, Model};
use crate::http::AppState;
use crate::tokenizer::Tokenizer;

/// Loads the model and tokenizer and starts the engine thread.
pub fn start(cfg: &ServeConfig) -> anyhow::Result<AppState> {
    cfg.validate()?;
    let path = cfg.model_path();
    let file = GgufFile::open(&path).with_context(|| {
        format!(
            "loading {} (run scripts/fetch-model for the default model)",
            path.display()
        )
    })?;
    let model = Model::from_file(&file)?;
    let tokenizer = Arc::new(Tokenizer::from_gguf(&file, cfg.tokenizer.as_deref())?);
    let metrics = Arc::new(metrics::Metrics::new(cfg.slots, &cfg.model_name()));
    let engine = EngineHandle::start_with_metrics(model, tokenizer.clone(), cfg.engine(), metrics);
    let mut state = AppState::new(engine, tokenizer, &cfg.model_name(), cfg.limits());
    state.api_keys = Arc::new(cfg.all_api_keys()?);
    state.cors_origins = Arc::new(cfg.cors_origins.clone());
    if let Some(token) = cfg.admin_token.clone().filter(|t| !t.is_empty()) {
        let current = checkpoint::describe(&path, &cfg.engine().weights_version)?;
        let signature = checkpoint::Signature::of(&file)?;
        state.admin = Some(Arc::new(http::admin::Admin::new(
            token,
            &cfg.reload_roots(),
            current,
            signature,
        )));
    }
    Ok(state)
}

/// Serves the API on `listener` until `shutdown` completes.
pub async fn run(
    listener: tokio::net::TcpListener,
    state: AppState,
    body_limit: usize,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = http::router(state, body_limit);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
