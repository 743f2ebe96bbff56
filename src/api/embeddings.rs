//! `POST /v1/embeddings` (OpenAI's shape).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What to embed: a text, texts, token ids, or lists of token ids.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    /// One text.
    Text(String),
    /// One input as token ids.
    Ids(Vec<i64>),
    /// Several texts.
    Texts(Vec<String>),
    /// Several inputs as token ids.
    IdLists(Vec<Vec<i64>>),
}

/// `POST /v1/embeddings`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[schema(example = json!({"input": ["The food was delicious", "The service was slow"]}))]
pub struct EmbeddingRequest {
    /// What to embed (at most 2,048 inputs, each within the context).
    pub input: EmbeddingInput,
    /// Model id (default: the server's first model).
    pub model: Option<String>,
    /// `float` (default) or `base64` (little-endian f32, as the official SDK asks for).
    pub encoding_format: Option<String>,
    /// Keep the first N dimensions and scale the vector back to unit length (for models
    /// trained so, "Matryoshka" embeddings).
    pub dimensions: Option<i64>,
    /// End-user id (not used).
    pub user: Option<String>,
}

/// An embedding: numbers, or their base64.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    /// `encoding_format: float`.
    Float(Vec<f32>),
    /// `encoding_format: base64`: the f32 values little-endian, base64.
    Base64(String),
}

/// One input's embedding.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct EmbeddingData {
    /// `embedding`.
    pub object: &'static str,
    /// The input's position in the request.
    pub index: usize,
    /// Its vector, of unit length.
    pub embedding: EmbeddingVector,
}

/// Token counts of an embeddings response.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct EmbeddingUsage {
    /// Tokens of every input.
    pub prompt_tokens: usize,
    /// The same.
    pub total_tokens: usize,
}

/// The embeddings, in input order.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct EmbeddingResponse {
    /// `list`.
    pub object: &'static str,
    /// One per input.
    pub data: Vec<EmbeddingData>,
    /// The model id.
    pub model: String,
    /// Token counts.
    pub usage: EmbeddingUsage,
}
