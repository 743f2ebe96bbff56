//! `GET /v1/models`.

use serde::Serialize;
use utoipa::ToSchema;

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
    /// Context length per sequence.
    pub max_model_len: usize,
    /// `loaded` (this server loads its model before it is ready).
    pub status: &'static str,
    /// Bytes of the model's file or folder.
    pub size: u64,
    /// What it serves: `completion`, `chat`, `tools`, `reasoning` (its chat template
    /// thinks), `embeddings` (with a pooling), `rerank` (with `--rerank`).
    pub capabilities: Vec<&'static str>,
}

/// `GET /v1/models`.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The served model.
    pub data: Vec<ModelCard>,
}
