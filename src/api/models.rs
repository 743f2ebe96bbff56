//! `GET /v1/models`.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `?model=`: which model a `GET` route describes (default: the server's first model).
#[derive(Clone, Debug, Default, Deserialize, IntoParams)]
pub struct ModelQuery {
    /// Model id.
    pub model: Option<String>,
}

/// A model in `GET /v1/models`.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ModelCard {
    /// Model id.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// Unix seconds the server started.
    pub created: u64,
    /// `sluice`.
    pub owned_by: &'static str,
    /// Context length per sequence (`null` for a model never loaded yet).
    pub max_model_len: Option<usize>,
    /// `loaded`, `loading`, `unloaded` (loaded by the first request that names it) or
    /// `failed` (its load failed; `error` says why).
    pub status: &'static str,
    /// Why its load failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Bytes of the model's file or folder.
    pub size: u64,
    /// What it serves: `completion`, `chat`, `tools`, `reasoning` (its chat template
    /// thinks), `embeddings` (with a pooling), `rerank` (with `--rerank`, or a
    /// classification head); empty for a model never loaded yet.
    pub capabilities: Vec<&'static str>,
}

/// `GET /v1/models`.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// Every model offered, the default one first.
    pub data: Vec<ModelCard>,
}
