//! Configuration: one `ServeConfig` (flags and `SLUICE_*` environment variables), read
//! once at start-up.

use std::path::PathBuf;

use crate::engine::EngineConfig;
use crate::validation::Limits;

/// File name of the default model fetched by `scripts/fetch-model`.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where `scripts/fetch-model` puts the default model: `$SLUICE_MODEL_DIR` or
/// `~/.cache/sluice/models`.
pub fn default_model_path() -> PathBuf {
    let dir = std::env::var_os("SLUICE_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
            PathBuf::from(home).join(".cache/sluice/models")
        });
    dir.join(DEFAULT_MODEL_FILE)
}

/// Options of `sluice serve`.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeConfig {
    /// GGUF model file (default: the SmolLM2-135M-Instruct fetched by scripts/fetch-model).
    #[arg(long, env = "SLUICE_MODEL")]
    pub model: Option<PathBuf>,
    /// A tokenizer.json to use instead of the vocabulary in the GGUF.
    #[arg(long, env = "SLUICE_TOKENIZER")]
    pub tokenizer: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "SLUICE_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, env = "SLUICE_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Model id clients use (default: the model file's name without `.gguf`).
    #[arg(long, env = "SLUICE_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,
    /// Concurrent sequences: rows of the KV slab.
    #[arg(long, env = "SLUICE_SLOTS", default_value_t = 32)]
    pub slots: usize,
    /// Positions per sequence (prompt + generated tokens).
    #[arg(long, env = "SLUICE_CONTEXT", default_value_t = 2048)]
    pub context: usize,
    /// Smallest power-of-two prompt bucket.
    #[arg(long, env = "SLUICE_MIN_BUCKET", default_value_t = 16)]
    pub min_bucket: usize,
    /// Token budget of one prefill batch (bucket length x prompts).
    #[arg(long, env = "SLUICE_MAX_PREFILL_TOKENS", default_value_t = 4096)]
    pub max_prefill_tokens: usize,
    /// Requests that may wait for a slot; more get 429 at once.
    #[arg(long, env = "SLUICE_MAX_QUEUED_REQUESTS", default_value_t = 256)]
    pub max_queued_requests: usize,
    /// Prompt tokens that may wait in the queue (0: no budget); more get 429 at once.
    #[arg(long, env = "SLUICE_MAX_QUEUED_TOKENS", default_value_t = 262_144)]
    pub max_queued_tokens: usize,
    /// Longest prompt in tokens (0: the context).
    #[arg(long, env = "SLUICE_MAX_PROMPT_TOKENS", default_value_t = 0)]
    pub max_prompt_tokens: usize,
    /// Largest `max_tokens` a request may ask for (0: the context).
    #[arg(long, env = "SLUICE_MAX_NEW_TOKENS", default_value_t = 0)]
    pub max_new_tokens: usize,
    /// Most stop strings per request.
    #[arg(long, env = "SLUICE_MAX_STOP", default_value_t = 4)]
    pub max_stop: usize,
    /// Most `logit_bias` entries per request.
    #[arg(long, env = "SLUICE_MAX_LOGIT_BIAS", default_value_t = 300)]
    pub max_logit_bias: usize,
    /// Most alternatives per token (`logprobs` / `top_logprobs`).
    #[arg(long, env = "SLUICE_MAX_TOP_LOGPROBS", default_value_t = 20)]
    pub max_top_logprobs: usize,
    /// Most prompts in one completions request.
    #[arg(long, env = "SLUICE_MAX_PROMPTS", default_value_t = 32)]
    pub max_prompts: usize,
    /// Seconds a whole request may take, queue included (0: no limit); past it the request
    /// ends with a 504 error (an error chunk when streaming).
    #[arg(long, env = "SLUICE_REQUEST_TIMEOUT", default_value_t = 600.0)]
    pub request_timeout: f64,
    /// Largest request body in bytes; larger ones get 413.
    #[arg(long, env = "SLUICE_MAX_BODY_BYTES", default_value_t = 4 << 20)]
    pub max_body_bytes: usize,
    /// Most choices (`n`) per prompt.
    #[arg(long, env = "SLUICE_MAX_N", default_value_t = 16)]
    pub max_n: usize,
    /// Seconds to let in-flight requests finish after SIGTERM/SIGINT before exiting.
    #[arg(long, env = "SLUICE_SHUTDOWN_GRACE", default_value_t = 30.0)]
    pub shutdown_grace: f64,
    /// Log format: `text` or `json` (one object per line). `RUST_LOG` sets the levels.
    #[arg(long, env = "SLUICE_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// API key clients must send as `Authorization: Bearer <key>` on `/v1/*`, `/tokenize`
    /// and `/detokenize` (repeatable; comma-separated in the env). None: open.
    #[arg(
        long = "api-key",
        env = "SLUICE_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<String>,
    /// A file of API keys, one per line (blank lines and `#` comments ignored).
    #[arg(long, env = "SLUICE_API_KEY_FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Origins allowed to call the API from a browser (repeatable; `*` for any). None: no
    /// CORS headers are sent.
    #[arg(
        long = "cors-origin",
        env = "SLUICE_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Token required as `Authorization: Bearer <token>` on `/admin/*`; without one the
    /// admin routes do not exist.
    #[arg(long, env = "SLUICE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Directories `POST /admin/reload` may load from (repeatable; default: the model
    /// file's directory). Paths are resolved, symlinks included, before the check.
    #[arg(long = "model-dir", env = "SLUICE_MODEL_DIR", value_delimiter = ',')]
    pub model_dirs: Vec<PathBuf>,
    /// Compute device. Only `cpu` is built by default (see the `cuda` feature).
    #[arg(long, env = "SLUICE_DEVICE", default_value = "cpu")]
    pub device: String,
}

impl ServeConfig {
    /// Directories reloads may read: `--model-dir`, else the model file's directory.
    pub fn reload_roots(&self) -> Vec<PathBuf> {
        if !self.model_dirs.is_empty() {
            return self.model_dirs.clone();
        }
        let model = self.model_path();
        let dir = model.parent().map(|p| p.to_path_buf()).unwrap_or_default();
        vec![if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        }]
    }

    /// The model file to load.
    pub fn model_path(&self) -> PathBuf {
        self.model.clone().unwrap_or_else(default_model_path)
    }

    /// The id clients use for the model.
    pub fn model_name(&self) -> String {
        self.served_model_name.clone().unwrap_or_else(|| {
            let p = self.model_path();
            let name = p
                .file_name()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            name.strip_suffix(".gguf").unwrap_or(&name).to_string()
        })
    }

    /// Checks values that clap cannot.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.slots >= 1, "--slots must be at least 1");
        anyhow::ensure!(self.context >= 2, "--context must be at least 2");
        anyhow::ensure!(self.min_bucket >= 1, "--min-bucket must be at least 1");
        anyhow::ensure!(
            self.max_prefill_tokens >= 1,
            "--max-prefill-tokens must be at least 1"
        );
        anyhow::ensure!(self.max_n >= 1, "--max-n must be at least 1");
        anyhow::ensure!(
            self.request_timeout.is_finite() && self.request_timeout >= 0.0,
            "--request-timeout must be a number of seconds (0: none)"
        );
        anyhow::ensure!(
            self.device == "cpu",
            "--device {}: this build runs on the CPU only (build with --features cuda for CUDA)",
            self.device
        );
        Ok(())
    }

    /// The engine's part.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            slots: self.slots,
            context: self.context,
            min_bucket: self.min_bucket,
            max_prefill_tokens: self.max_prefill_tokens,
            max_queued: self.max_queued_requests,
            max_queued_tokens: self.max_queued_tokens,
            max_prompt_tokens: self.max_prompt_tokens,
            max_new_tokens: self.max_new_tokens,
            request_timeout: (self.request_timeout > 0.0)
                .then(|| std::time::Duration::from_secs_f64(self.request_timeout)),
            weights_version: "v1".into(),
        }
    }

    /// Every configured API key: `--api-key` and the lines of `--api-key-file`.
    pub fn all_api_keys(&self) -> anyhow::Result<Vec<String>> {
        let mut keys: Vec<String> = self
            .api_keys
            .iter()
            .filter(|k| !k.is_empty())
            .cloned()
            .collect();
        if let Some(f) = &self.api_key_file {
            let text = std::fs::read_to_string(f)
                .map_err(|e| anyhow::anyhow!("--api-key-file {}: {e}", f.display()))?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
        }
        Ok(keys)
    }

    /// The validation limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_n: self.max_n,
            max_stop: self.max_stop,
            max_logit_bias: self.max_logit_bias,
            max_top_logprobs: self.max_top_logprobs,
            max_prompts: self.max_prompts,
            ..Limits::for_context(self.context)
        }
    }
}
