//! `POST /v1/rerank` (the shape llama.cpp and vLLM serve, as Jina and Cohere define it).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/rerank`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[schema(example = json!({"query": "What is the capital of France?", "documents": ["Paris is the capital of France.", "Berlin is in Germany."]}))]
pub struct RerankRequest {
    /// Model id (default: the server's first model).
    pub model: Option<String>,
    /// What the documents are judged against.
    pub query: String,
    /// The texts to score (at most 1,024).
    pub documents: Vec<String>,
    /// Results to return, best first (default: all).
    pub top_n: Option<i64>,
    /// Include each document's text in its result (default true).
    pub return_documents: Option<bool>,
    /// The task, in the reranker's prompt (default: "Given a web search query, retrieve
    /// relevant passages that answer the query").
    pub instruction: Option<String>,
}

/// A document's text in a result.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct RerankDocument {
    /// The text.
    pub text: String,
}

/// One document's score.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct RerankResult {
    /// The document's position in the request.
    pub index: usize,
    /// A probability in [0, 1]: P(yes) of a yes/no reranker's answer, or of its
    /// classification head's `yes` label (a sigmoid of a single output).
    pub relevance_score: f64,
    /// The document, unless `return_documents` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<RerankDocument>,
}

/// Token counts of a rerank response.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, ToSchema)]
pub struct RerankUsage {
    /// Tokens of every prompt.
    pub prompt_tokens: usize,
    /// The same.
    pub total_tokens: usize,
}

/// The documents' scores, best first.
#[derive(Clone, Debug, Serialize, PartialEq, ToSchema)]
pub struct RerankResponse {
    /// Response id (`rerank-...`).
    pub id: String,
    /// `list`.
    pub object: &'static str,
    /// The model id.
    pub model: String,
    /// Best first.
    pub results: Vec<RerankResult>,
    /// Token counts.
    pub usage: RerankUsage,
}
