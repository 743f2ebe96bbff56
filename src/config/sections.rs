//! The checked configuration's sections (`ServeArgs::config` builds them), and what
//! follows the model once it is loaded (`Config::fit_to_model`).

use std::path::PathBuf;
use std::time::Duration;

use sluice_engine::EngineConfig;

use crate::validation::Limits;

/// Which model to serve and under what name.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The GGUF file.
    pub path: PathBuf,
    /// What replaces parts of the file (tokenizer, chat template).
    pub load: sluice_engine::LoadOptions,
    /// The id clients use.
    pub name: String,
    /// A second, smaller model with the same vocabulary that drafts tokens for speculative
    /// decoding (`--draft-model`, the default model's only).
    pub draft: Option<PathBuf>,
    /// Loaded at start (each `--model`, and the default model), not on first request.
    pub preload: bool,
}

/// The HTTP server.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// Address to listen on (host:port).
    pub address: String,
    /// Largest request body in bytes.
    pub max_body_bytes: usize,
    /// API keys (empty: open).
    pub api_keys: Vec<String>,
    /// CORS origins (empty: no CORS headers).
    pub cors_origins: Vec<String>,
    /// `--tool-call-parser` (`None`: from the chat template).
    pub tool_parser: Option<crate::tools::ToolFormat>,
    /// `--pooling` (`None`: the model file's, if any).
    pub pooling: Option<sluice_engine::Pooling>,
    /// `--rerank`.
    pub rerank: bool,
    /// Serve the chat page at `/`.
    pub ui: bool,
    /// After SIGTERM/SIGINT: how long in-flight requests may take before they are ended.
    pub shutdown_grace: Duration,
    /// Connection limits.
    pub conn: ConnLimits,
    /// HTTPS certificate and key (`None`: plain HTTP).
    pub tls: Option<TlsFiles>,
}

/// The admin API (present only with a token).
#[derive(Clone, Debug)]
pub struct AdminConfig {
    /// The bearer token.
    pub token: String,
    /// Directories reloads may read.
    pub reload_dirs: Vec<PathBuf>,
}

/// Values that follow the model's context once it is loaded (their flags were not given).
#[derive(Clone, Copy, Debug, Default)]
pub struct Auto {
    /// `--context`.
    pub context: bool,
    /// `--max-prompt-tokens`.
    pub max_prompt_tokens: bool,
    /// `--max-new-tokens`.
    pub max_new_tokens: bool,
}

/// Everything the server runs on, checked.
#[derive(Clone, Debug)]
pub struct Config {
    /// What `fit_to_model` sets.
    pub auto: Auto,
    /// The models offered, the default one first.
    pub models: Vec<ModelConfig>,
    /// Most models loaded at once (0: no limit).
    pub max_loaded: usize,
    /// How long a model may go without requests before it is unloaded.
    pub idle_unload: Option<Duration>,
    /// The engine.
    pub engine: EngineConfig,
    /// Request limits (validation).
    pub limits: Limits,
    /// The HTTP server.
    pub http: HttpConfig,
    /// The admin API.
    pub admin: Option<AdminConfig>,
    /// Log format: `text` or `json`.
    pub log_format: String,
}

/// Bounds on connections.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// Time to send a request's headers, from the connection's start or the request's
    /// first byte.
    pub header_timeout: Duration,
    /// Time to send a request's body once its headers are in.
    pub body_timeout: Duration,
    /// Time a kept-alive connection may stay idle between requests.
    pub idle_timeout: Duration,
}

/// The certificate chain and key files.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsFiles {
    /// PEM certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}
