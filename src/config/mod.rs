//! Configuration: `ServeArgs` (flags and `SLUICE_*` environment variables) is checked once
//! at start-up into a `Config` of sections (model, engine, limits, HTTP, admin, logging).
//! Every numeric flag has a range; a value outside it, NaN or negative is a start-up error
//! naming the flag, never a panic.

use std::path::PathBuf;

use sluice_engine::EngineConfig;

use crate::validation::Limits;

mod checks;
mod models;
mod sections;
pub use checks::{ConfigError, quantize};
use checks::{at_least_100ms, int, seconds};
pub use models::id_of;
pub use sections::{AdminConfig, Auto, Config, ConnLimits, HttpConfig, ModelConfig, TlsFiles};

/// File name of the default model fetched by `scripts/fetch-model`.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Where `scripts/fetch-model` puts the default model: `$SLUICE_MODEL_DIR` (the model
/// cache; nothing else reads that variable) or `~/.cache/sluice/models`.
pub fn default_model_path() -> PathBuf {
    let dir = std::env::var_os("SLUICE_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
            PathBuf::from(home).join(".cache/sluice/models")
        });
    dir.join(DEFAULT_MODEL_FILE)
}

/// Options of `sluice serve`, as given (flags and `SLUICE_*` variables). [`ServeArgs::config`]
/// checks every value once and makes the [`Config`] the server runs on.
#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// GGUF model file or Hugging Face folder, as `PATH` or `ID=PATH` (repeatable: the
    /// first is the default model; all are loaded at start). Default: the
    /// SmolLM2-135M-Instruct fetched by scripts/fetch-model.
    #[arg(long, env = "SLUICE_MODEL")]
    pub model: Vec<String>,
    /// A directory whose GGUF files and Hugging Face folders are offered too, each loaded
    /// on the first request that names it (its id: the file name without `.gguf`, or the
    /// folder's name).
    #[arg(long, env = "SLUICE_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Most models loaded at once (0: no limit); loading one more first unloads the least
    /// recently used model that has no request in flight.
    #[arg(long, env = "SLUICE_MAX_LOADED_MODELS", default_value_t = 0)]
    pub max_loaded_models: usize,
    /// Seconds a model may go without requests before it is unloaded (0: never). The
    /// default model is unloaded too, and loaded again by the next request for it.
    #[arg(long, env = "SLUICE_MODEL_IDLE_UNLOAD", default_value_t = 0.0)]
    pub model_idle_unload: f64,
    /// What a Hugging Face folder's weight matrices are quantised to at load time:
    /// q8_0, q4_0, q4_k or none.
    #[arg(long, env = "SLUICE_QUANTIZE", default_value = "q8_0")]
    pub quantize: String,
    /// A tokenizer.json to use instead of the vocabulary in the GGUF.
    #[arg(long, env = "SLUICE_TOKENIZER")]
    pub tokenizer: Option<PathBuf>,
    /// A Jinja chat template file to use instead of the model's (or its family's built-in
    /// one).
    #[arg(long, env = "SLUICE_CHAT_TEMPLATE")]
    pub chat_template: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "SLUICE_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, env = "SLUICE_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Id clients use for the first `--model` given without one (default: the model
    /// file's name without `.gguf`).
    #[arg(long, env = "SLUICE_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,
    /// Most sequences running at once (each holds a block table of the KV pool).
    #[arg(long, env = "SLUICE_SLOTS", default_value_t = 32)]
    pub slots: usize,
    /// Longest sequence: prompt + generated tokens (default: the model's trained context,
    /// at most --kv-cache-tokens).
    #[arg(long, env = "SLUICE_CONTEXT")]
    pub context: Option<usize>,
    /// Positions the KV pool holds for all sequences together, allocated once at start-up
    /// (default: --slots x 2,048, or --slots x --context when --context is given).
    #[arg(long, env = "SLUICE_KV_CACHE_TOKENS")]
    pub kv_cache_tokens: Option<usize>,
    /// Smallest power-of-two prompt bucket.
    #[arg(long, env = "SLUICE_MIN_BUCKET", default_value_t = 16)]
    pub min_bucket: usize,
    /// Tokens one forward pass carries: a row per decoding sequence plus chunks of the
    /// prompts being prefilled, a row late in a long prompt counting for more than one (at
    /// least --slots + --min-bucket; default --slots + 32).
    #[arg(long, env = "SLUICE_MAX_BATCH_TOKENS")]
    pub max_batch_tokens: Option<usize>,
    /// Never reuse keys and values of earlier requests' prompts.
    #[arg(long, env = "SLUICE_NO_PREFIX_REUSE")]
    pub no_prefix_reuse: bool,
    /// Shortest common prompt prefix worth reusing, in tokens.
    #[arg(long, env = "SLUICE_MIN_PREFIX_REUSE", default_value_t = 16)]
    pub min_prefix_reuse: usize,
    /// Put the KV pool on transparent huge pages: faster attention, but memory is taken
    /// 2 MB per layer and head at a time, so the pool soon becomes resident in full.
    #[arg(long, env = "SLUICE_KV_HUGE_PAGES")]
    pub kv_huge_pages: bool,
    /// Speculative decoding: `ngram` drafts tokens from each sequence's own prompt and
    /// output (where its last tokens occurred before) and verifies them in the step's
    /// forward pass, never changing a token; `off` decodes one token per step.
    #[arg(long, env = "SLUICE_SPECULATIVE", default_value = "ngram", value_parser = ["ngram", "off"])]
    pub speculative: String,
    /// A second, smaller model (GGUF file or Hugging Face folder) with the model's
    /// vocabulary: speculation drafts with it instead of from the context.
    #[arg(long, env = "SLUICE_DRAFT_MODEL")]
    pub draft_model: Option<PathBuf>,
    /// Most drafted tokens a sequence verifies per step.
    #[arg(long, env = "SLUICE_SPEC_TOKENS", default_value_t = 8)]
    pub spec_tokens: usize,
    /// Speculation pauses while more sequences than this decode at once (their rows
    /// already keep the matrix kernels busy).
    #[arg(long, env = "SLUICE_SPEC_MAX_BATCH", default_value_t = 8)]
    pub spec_max_batch: usize,
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
    /// Open connections at most; one more gets one request (a probe is answered, anything
    /// else gets 503) and is closed.
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS", default_value_t = 2048)]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers, from when its connection opened
    /// or the request's first byte arrived.
    #[arg(long, env = "SLUICE_HEADER_READ_TIMEOUT", default_value_t = 10.0)]
    pub header_read_timeout: f64,
    /// Seconds a client has to send a whole request body once its headers arrived; past
    /// it the request gets 408 and the connection closes.
    #[arg(long, env = "SLUICE_BODY_READ_TIMEOUT", default_value_t = 30.0)]
    pub body_read_timeout: f64,
    /// Seconds a kept-alive connection may stay idle between a response and the next
    /// request before the server closes it.
    #[arg(long, env = "SLUICE_IDLE_TIMEOUT", default_value_t = 60.0)]
    pub idle_timeout: f64,
    /// PEM certificate chain to serve HTTPS with (with `--tls-key-file`); reloaded on
    /// SIGHUP or when the file changes.
    #[arg(long, env = "SLUICE_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `--tls-cert-file`.
    #[arg(long, env = "SLUICE_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
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
    /// How tool calls are read from the model's output: hermes (also qwen), llama3,
    /// mistral, mistral_args, qwen3_coder, granite, deepseek_r1 or command_r7b. Default:
    /// what the chat template shows (hermes when it shows none).
    #[arg(long, env = "SLUICE_TOOL_CALL_PARSER")]
    pub tool_call_parser: Option<String>,
    /// How `/v1/embeddings` pools a text's hidden states: mean, cls or last. Default: the
    /// model file's `pooling_type`; without one, embeddings are refused.
    #[arg(long, env = "SLUICE_POOLING")]
    pub pooling: Option<String>,
    /// Serve `/v1/rerank` with the model as a yes/no reranker (the Qwen3-Reranker recipe);
    /// its vocabulary must have `yes` and `no` as tokens. A file with a classification
    /// head is served as a reranker without it.
    #[arg(long, env = "SLUICE_RERANK")]
    pub rerank: bool,
    /// Origins allowed to call the API from a browser (repeatable; `*` for any). None: no
    /// CORS headers are sent.
    #[arg(
        long = "cors-origin",
        env = "SLUICE_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Do not serve the chat page at `/`.
    #[arg(long, env = "SLUICE_NO_UI")]
    pub no_ui: bool,
    /// Token required as `Authorization: Bearer <token>` on `/admin/*`; without one the
    /// admin routes do not exist.
    #[arg(long, env = "SLUICE_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Directories `POST /admin/reload` may load from (repeatable; default: the model
    /// file's directory). Paths are resolved, symlinks included, before the check.
    #[arg(
        long = "reload-dir",
        alias = "model-dir",
        env = "SLUICE_RELOAD_DIRS",
        value_delimiter = ','
    )]
    pub reload_dirs: Vec<PathBuf>,
    /// Compute device. Only `cpu` is built by default (see the `cuda` feature).
    #[arg(long, env = "SLUICE_DEVICE", default_value = "cpu")]
    pub device: String,
}

/// Longest `--request-timeout` and `--shutdown-grace`: a year and a day.
const MAX_TIMEOUT_S: f64 = 31_536_000.0;
/// Positions per slot the default pool holds (`--kv-cache-tokens` is `--slots` times it).
const DEFAULT_CONTEXT: usize = 2048;
const MAX_GRACE_S: f64 = 86_400.0;

impl Config {
    /// The default model: the one requests that name none are served by.
    pub fn model(&self) -> &ModelConfig {
        &self.models[0]
    }

    /// Sets what follows the model: without `--context`, the longest sequence is the
    /// model's trained context, at most the pool's positions; limits left at 0 follow it.
    pub fn fit_to_model(&mut self, train_context: usize) {
        if !self.auto.context {
            return;
        }
        let context = train_context.clamp(2, self.engine.kv_tokens());
        self.engine.context = context;
        self.engine.min_bucket = self.engine.min_bucket.min(context);
        self.engine.min_prefix_reuse = self.engine.min_prefix_reuse.min(context);
        let l = &mut self.limits;
        l.context = context;
        if self.auto.max_prompt_tokens {
            l.max_prompt_tokens = context;
        }
        if self.auto.max_new_tokens {
            l.max_new_tokens = context;
        }
        l.max_prompt_tokens = l.max_prompt_tokens.min(context);
        l.max_new_tokens = l.max_new_tokens.min(context);
    }
}
impl ServeArgs {
    /// Checks every value and builds the configuration.
    pub fn config(&self) -> Result<Config, ConfigError> {
        const BIG: usize = 1 << 30;
        let slots = int("slots", self.slots, 1, 4096)?;
        let given = match self.context {
            Some(c) => Some(int("context", c, 2, 1 << 20)?),
            None => None,
        };
        let kv_tokens = match self.kv_cache_tokens {
            Some(n) => int("kv-cache-tokens", n, 16, 1 << 26)?,
            None => slots * given.unwrap_or(DEFAULT_CONTEXT),
        };
        if let Some(c) = given.filter(|&c| c > kv_tokens) {
            return Err(ConfigError::Invalid {
                flag: "context",
                reason: format!(
                    "{c} is longer than the KV pool's {kv_tokens} positions \
                     (--kv-cache-tokens): no sequence that long could ever fit"
                ),
            });
        }
        // Until the model is loaded (`Config::fit_to_model`), the context is the pool.
        let context = given.unwrap_or(kv_tokens).min(1 << 20);
        let cap = |v: usize| if v == 0 { context } else { v };
        let limits = Limits {
            context,
            max_prompt_tokens: cap(int(
                "max-prompt-tokens",
                self.max_prompt_tokens,
                0,
                context,
            )?),
            max_new_tokens: cap(int("max-new-tokens", self.max_new_tokens, 0, context)?),
            max_n: int("max-n", self.max_n, 1, 128)?,
            max_stop: int("max-stop", self.max_stop, 0, 64)?,
            max_logit_bias: int("max-logit-bias", self.max_logit_bias, 0, 1 << 20)?,
            max_top_logprobs: int("max-top-logprobs", self.max_top_logprobs, 0, 1024)?,
            max_prompts: int("max-prompts", self.max_prompts, 1, 4096)?,
            slots,
            kv_tokens,
        };
        let timeout = seconds("request-timeout", self.request_timeout, MAX_TIMEOUT_S)?;
        let min_bucket = int("min-bucket", self.min_bucket, 1, context)?;
        let max_batch_tokens = match self.max_batch_tokens {
            Some(b) => int("max-batch-tokens", b, 1, BIG)?,
            None => slots + 32.max(min_bucket),
        };
        if max_batch_tokens < slots + min_bucket {
            return Err(ConfigError::Invalid {
                flag: "max-batch-tokens",
                reason: format!(
                    "{max_batch_tokens} cannot hold a decode row for each of the {slots} slots \
                     plus a prompt chunk of --min-bucket {min_bucket}: use at least {}",
                    slots + min_bucket
                ),
            });
        }
        let engine = EngineConfig {
            slots,
            context,
            kv_cache_tokens: kv_tokens,
            min_bucket,
            max_batch_tokens,
            prefix_reuse: !self.no_prefix_reuse,
            min_prefix_reuse: int("min-prefix-reuse", self.min_prefix_reuse, 1, context)?,
            kv_huge_pages: self.kv_huge_pages,
            spec_tokens: match self.speculative.as_str() {
                "off" => 0,
                _ => int("spec-tokens", self.spec_tokens, 1, 64)?,
            },
            spec_max_batch: int("spec-max-batch", self.spec_max_batch, 0, BIG)?,
            max_queued: int("max-queued-requests", self.max_queued_requests, 1, 1 << 20)?,
            max_queued_tokens: int("max-queued-tokens", self.max_queued_tokens, 0, BIG)?,
            request_timeout: (!timeout.is_zero()).then_some(timeout),
            weights_version: "v1".into(),
        };
        if self.device != "cpu" {
            return Err(ConfigError::Invalid {
                flag: "device",
                reason: format!(
                    "`{}`: this build runs on the CPU only (build with --features cuda for CUDA)",
                    self.device
                ),
            });
        }
        let http = HttpConfig {
            address: format!("{}:{}", self.host, self.port),
            max_body_bytes: int("max-body-bytes", self.max_body_bytes, 1024, BIG)?,
            api_keys: self.all_api_keys()?,
            cors_origins: self.cors_origins.clone(),
            tool_parser: match self.tool_call_parser.as_deref() {
                None => None,
                Some(n) => Some(crate::tools::ToolFormat::named(n).ok_or_else(|| {
                    ConfigError::Invalid {
                        flag: "tool-call-parser",
                        reason: format!(
                            "`{n}`: use hermes, qwen, llama3, mistral, mistral_args, \
                             qwen3_coder, granite, deepseek_r1 or command_r7b"
                        ),
                    }
                })?),
            },
            rerank: self.rerank,
            pooling: match self.pooling.as_deref() {
                None => None,
                Some(n) => {
                    Some(
                        sluice_engine::Pooling::named(n).ok_or_else(|| ConfigError::Invalid {
                            flag: "pooling",
                            reason: format!("`{n}`: use mean, cls or last"),
                        })?,
                    )
                }
            },
            ui: !self.no_ui,
            shutdown_grace: seconds("shutdown-grace", self.shutdown_grace, MAX_GRACE_S)?,
            conn: ConnLimits {
                max_connections: int("max-connections", self.max_connections, 1, 1 << 20)?,
                header_timeout: at_least_100ms("header-read-timeout", self.header_read_timeout)?,
                body_timeout: at_least_100ms("body-read-timeout", self.body_read_timeout)?,
                idle_timeout: at_least_100ms("idle-timeout", self.idle_timeout)?,
            },
            tls: match (&self.tls_cert_file, &self.tls_key_file) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
        };
        let models = self.models(&ModelConfig {
            path: PathBuf::new(),
            load: sluice_engine::LoadOptions {
                tokenizer: self.tokenizer.clone(),
                chat_template: self.chat_template.clone(),
                quantize: quantize(&self.quantize)?,
            },
            name: String::new(),
            draft: self
                .draft_model
                .clone()
                .filter(|_| self.speculative != "off"),
            preload: true,
        })?;
        let admin = self
            .admin_token
            .clone()
            .filter(|t| !t.is_empty())
            .map(|token| AdminConfig {
                token,
                reload_dirs: self.reload_roots(&models),
            });
        Ok(Config {
            auto: Auto {
                context: given.is_none(),
                max_prompt_tokens: self.max_prompt_tokens == 0,
                max_new_tokens: self.max_new_tokens == 0,
            },
            models,
            max_loaded: self.max_loaded_models,
            idle_unload: match seconds("model-idle-unload", self.model_idle_unload, MAX_TIMEOUT_S)?
            {
                d if d.is_zero() => None,
                d => Some(d),
            },
            engine,
            limits,
            http,
            admin,
            log_format: self.log_format.clone(),
        })
    }

    /// Directories reloads may read: `--reload-dir`, else the directories of the models'
    /// files.
    fn reload_roots(&self, models: &[ModelConfig]) -> Vec<PathBuf> {
        if !self.reload_dirs.is_empty() {
            return self.reload_dirs.clone();
        }
        let mut roots: Vec<PathBuf> = Vec::new();
        for m in models {
            let dir = m.path.parent().map(|p| p.to_path_buf()).unwrap_or_default();
            let dir = if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            };
            if !roots.contains(&dir) {
                roots.push(dir);
            }
        }
        roots
    }

    /// Every configured API key: `--api-key` and the lines of `--api-key-file`.
    fn all_api_keys(&self) -> Result<Vec<String>, ConfigError> {
        let mut keys: Vec<String> = self
            .api_keys
            .iter()
            .filter(|k| !k.is_empty())
            .cloned()
            .collect();
        if let Some(f) = &self.api_key_file {
            let text = std::fs::read_to_string(f).map_err(|e| ConfigError::Invalid {
                flag: "api-key-file",
                reason: format!("{}: {e}", f.display()),
            })?;
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from),
            );
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests;
