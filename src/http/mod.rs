//! The HTTP layer: routes and the state every handler shares.

mod activity;
pub mod admin;
pub mod auth;
pub mod conn;
pub mod generate;
pub mod health;
pub mod json;
pub mod messages;
pub mod models;
pub mod openai;
pub mod openapi;
pub mod request_id;
pub mod responses;
pub mod tls;
pub mod ui;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use models::{Lease, Models};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::Uri;
use axum::routing::{get, post};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};

use utoipa::OpenApi;

use sluice_engine::{EngineHandle, Grammars, Tokenizer};
use tokio::sync::watch;

use crate::error::{ApiError, HttpError};
use crate::metrics::HttpMetrics;
use crate::validation::Limits;

/// What every route shares, whichever model it serves. Cheap to clone.
#[derive(Clone)]
pub struct Common {
    /// Unix seconds at start.
    pub started: u64,
    /// Set when the server stops taking requests (`/ready` turns 503).
    pub draining: Arc<AtomicBool>,
    /// Turns true when the shutdown grace period has run out: open streams end with an
    /// error chunk and waiting answers with 503.
    pub deadline: Arc<watch::Sender<bool>>,
    /// The HTTP layer's metrics (in `registry`).
    pub http_metrics: HttpMetrics,
    /// The server's own metrics; each model's engine has a registry of its own.
    pub registry: prometheus::Registry,
    /// API keys accepted on `/v1/*` and the tokenizer routes (empty: open).
    pub api_keys: Arc<Vec<String>>,
    /// Origins allowed by CORS (empty: no CORS headers; `*`: any).
    pub cors_origins: Arc<Vec<String>>,
    /// The admin token (`None`: no admin routes).
    pub admin_token: Option<Arc<str>>,
    /// Serve the chat page at `/` (off with `--no-ui`).
    pub ui: bool,
}

impl Common {
    /// Shared state for a server about to start.
    pub fn new() -> Self {
        let registry = prometheus::Registry::new();
        Self {
            started: unix_now(),
            draining: Arc::new(AtomicBool::new(false)),
            deadline: Arc::new(watch::Sender::new(false)),
            http_metrics: HttpMetrics::register(&registry),
            registry,
            api_keys: Arc::new(Vec::new()),
            cors_origins: Arc::new(Vec::new()),
            admin_token: None,
            ui: true,
        }
    }
}

impl Default for Common {
    fn default() -> Self {
        Self::new()
    }
}

/// The router's state: the models and what all routes share.
#[derive(Clone)]
pub struct ServerState {
    /// Every model offered.
    pub models: Arc<Models>,
    /// What all routes share.
    pub common: Common,
}

impl std::ops::Deref for ServerState {
    type Target = Common;
    fn deref(&self) -> &Common {
        &self.common
    }
}

impl ServerState {
    /// The state of the model a request names (`None`: the default model), loaded if
    /// need be; see [`Models::get`].
    pub async fn model(&self, id: Option<&str>) -> Result<AppState, ApiError> {
        self.models.get(id).await
    }
}

/// What a handler serving one model can reach. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The engine.
    pub engine: EngineHandle,
    /// The tokenizer (shared with the engine).
    pub tokenizer: Arc<Tokenizer>,
    /// The id clients use for the model.
    pub model_name: Arc<str>,
    /// Request field bounds.
    pub limits: Arc<Limits>,
    /// What all routes share.
    pub common: Common,
    /// The admin API's record of this model's weights, when an admin token is configured.
    pub admin: Option<Arc<admin::Admin>>,
    /// The grammar compiler for structured outputs (`None` if the vocabulary cannot be
    /// given to it; such requests are then refused).
    pub grammars: Option<Arc<Grammars>>,
    /// `--tool-call-parser` (`None`: from the chat template).
    pub tool_parser: Option<crate::tools::ToolFormat>,
    /// How `/v1/embeddings` pools (`None`: embeddings are refused).
    pub pooling: Option<sluice_engine::Pooling>,
    /// How `/v1/rerank` scores, when the model is served as a reranker (`--rerank`, or a
    /// file with a classification head).
    pub rerank: Option<openai::rerank::Reranker>,
    /// Bytes of the model's file or folder (`/v1/models`).
    pub model_bytes: u64,
    /// The request's hold on the model (none in the registry's own copy): the model is
    /// not unloaded while a request holds it.
    pub lease: Option<Arc<Lease>>,
}

impl AppState {
    /// State for a running engine.
    pub fn new(
        engine: EngineHandle,
        tokenizer: Arc<Tokenizer>,
        model_name: &str,
        limits: Limits,
        common: &Common,
    ) -> Self {
        let grammars = match Grammars::new(tokenizer.clone()) {
            Ok(g) => Some(Arc::new(g)),
            Err(e) => {
                tracing::warn!("structured outputs are off: {e}");
                None
            }
        };
        Self {
            grammars,
            tool_parser: None,
            pooling: None,
            rerank: None,
            model_bytes: 0,
            engine,
            tokenizer,
            model_name: model_name.into(),
            limits: Arc::new(limits),
            common: common.clone(),
            admin: None,
            lease: None,
        }
    }

    /// Refuses new generation work while the server drains.
    pub fn check_open(&self) -> Result<(), ApiError> {
        if self.common.draining.load(Ordering::SeqCst) {
            return Err(HttpError::Draining.into());
        }
        Ok(())
    }
}

/// Runs CPU-bound request work (tokenisation, chat templates) on the blocking pool so the
/// async workers keep serving; a panic in it is re-raised here, where the panic layer
/// turns it into a 500.
pub async fn off_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: only when the runtime itself is going away.
            Err(e) => panic!("a blocking task was cancelled: {e}"),
        },
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn not_found(uri: Uri) -> ApiError {
    HttpError::RouteNotFound(uri.path().to_string()).into()
}

/// All routes. `body_limit` caps request bodies (413 beyond it).
pub fn router(state: ServerState, body_limit: usize) -> Router {
    let admin = match state.admin_token {
        Some(_) => admin::routes(state.clone()),
        None => Router::new(),
    };
    // The API proper: API keys required when configured.
    let api = Router::new()
        .route("/v1/completions", post(openai::completions::handle))
        .route("/v1/chat/completions", post(openai::chat::handle))
        .route("/v1/models", get(openai::models::list))
        .route("/v1/models/{id}", get(openai::models::get_one))
        .route("/v1/embeddings", post(openai::embeddings::handle))
        .route("/v1/rerank", post(openai::rerank::handle))
        .route("/rerank", post(openai::rerank::handle))
        .route("/tokenize", post(openai::tokenize::tokenize))
        .route("/detokenize", post(openai::tokenize::detokenize))
        .route("/tokenizer_info", get(openai::tokenize::info))
        .route("/v1/responses", post(responses::handle))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::api_key,
        ));
    // Anthropic's API: the same keys (also as `x-api-key`), every error in its shape.
    let anthropic = Router::new()
        .route("/v1/messages", post(messages::handle))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::api_key,
        ))
        .layer(axum::middleware::from_fn(messages::errors));
    let cors = cors(&state.cors_origins);
    let chat_page = match state.ui {
        true => ui::chat_routes(),
        false => Router::new(),
    };
    Router::new()
        .merge(admin)
        .merge(api)
        .merge(anthropic)
        .merge(chat_page)
        .merge(ui::docs_routes())
        .route("/health", get(health::health))
        .route("/ready", get(health::ready))
        .route("/metrics", get(health::metrics))
        .route(
            "/openapi.json",
            get(|| async { axum::Json(openapi::ApiDoc::openapi()) }),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            health::track,
        ))
        .fallback(not_found)
        .layer(CatchPanicLayer::custom(panicked))
        .layer(axum::middleware::from_fn(request_id::middleware))
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(cors)
        .with_state(state)
}

/// A handler panic becomes a logged 500 in OpenAI's error shape; the server goes on.
fn panicked(err: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let what = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("a panic");
    tracing::error!(panic = what, "handler panicked");
    ApiError::from(HttpError::Panicked).into_response()
}

/// CORS for the configured origins (none: the layer adds nothing).
fn cors(origins: &[String]) -> CorsLayer {
    use axum::http::{HeaderName, Method, header};
    if origins.is_empty() {
        return CorsLayer::new();
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| o.parse().ok()))
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            HeaderName::from_static("x-request-id"),
            HeaderName::from_static("x-api-key"),
            HeaderName::from_static("anthropic-version"),
            HeaderName::from_static("anthropic-beta"),
        ])
        .expose_headers([HeaderName::from_static("x-request-id")])
}
