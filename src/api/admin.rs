//! Wire types of the admin API.

use serde::{Deserialize, Serialize};
use sluice_engine::ReloadMode;
use sluice_engine::checkpoint::Checkpoint;

/// What happens to requests in flight when new weights arrive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = ReloadMode)]
pub enum Mode {
    /// Stop admitting prefills, let running sequences finish on the old weights, swap,
    /// resume. No response mixes weights.
    #[default]
    Wait,
    /// Swap at the next step; running sequences continue on the new weights.
    Keep,
    /// End running sequences with an error, then swap.
    Abort,
}

impl From<Mode> for ReloadMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Wait => ReloadMode::Wait,
            Mode::Keep => ReloadMode::Keep,
            Mode::Abort => ReloadMode::Abort,
        }
    }
}

/// A loaded checkpoint.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Checkpoint)]
pub struct CheckpointInfo {
    /// Label (`system_fingerprint` of the completions it produces).
    #[schema(example = "v2")]
    pub version: String,
    /// File path.
    pub path: String,
    /// File size in bytes.
    pub size_bytes: u64,
    /// SHA-256 of the file, hex.
    pub sha256: String,
    /// Unix seconds when it started serving.
    pub loaded_at: u64,
}

impl From<Checkpoint> for CheckpointInfo {
    fn from(c: Checkpoint) -> Self {
        Self {
            version: c.version,
            path: c.path.display().to_string(),
            size_bytes: c.size_bytes,
            sha256: c.sha256,
            loaded_at: c.loaded_at,
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
    pub mode: Mode,
    /// Label for the new weights (default `v<N>`), reported as `system_fingerprint`.
    pub version: Option<String>,
    /// Which model's weights to replace (default: the server's first model); it is
    /// loaded first if it is not.
    pub model: Option<String>,
}

/// Result of a reload.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReloadResponse {
    /// The new weights.
    pub weights: CheckpointInfo,
    /// Version that was replaced.
    pub previous_version: String,
    /// Mode used.
    pub mode: Mode,
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
    /// The model.
    pub model: String,
    /// The weights in use.
    pub current: CheckpointInfo,
    /// The weights they replaced, if any.
    pub previous: Option<CheckpointInfo>,
    /// Whether a reload is in progress (another one now gets 409).
    pub reloading: bool,
    /// Whether the engine holds the new weights and waits to swap them in (`wait` mode:
    /// for the running requests to finish); requests arriving now are served by them.
    pub swap_pending: bool,
}
