//! `POST /v1/rerank` (also `/rerank`): documents scored against a query by a reranker that
//! answers yes or no (the Qwen3-Reranker recipe: its prompt, then P(yes) over yes and no
//! at the last position), best first.

use axum::extract::State;

use crate::api::ErrorResponse;
use crate::api::rerank::{
    RerankDocument, RerankRequest, RerankResponse, RerankResult, RerankUsage,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{AppState, off_thread};
use crate::validation::{ValidationError, check_model};

/// Documents one request may hold.
pub const MAX_DOCUMENTS: usize = 1024;

const SYSTEM: &str = "Judge whether the Document meets the requirements based on the Query \
                      and the Instruct provided. Note that the answer can only be \"yes\" or \
                      \"no\".";

/// The task when the request names none (Qwen3-Reranker's default).
pub const DEFAULT_INSTRUCTION: &str =
    "Given a web search query, retrieve relevant passages that answer the query";

/// The reranker's prompt for one document.
pub fn prompt(instruction: &str, query: &str, document: &str) -> String {
    format!(
        "<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: {instruction}\n\
         <Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n\
         <think>\n\n</think>\n\n"
    )
}

fn bad(param: &'static str, m: impl Into<String>) -> ApiError {
    ValidationError::invalid(param, m).into()
}

/// Scores each document against the query, best first.
#[utoipa::path(
    post,
    path = "/v1/rerank",
    operation_id = "rerank",
    tag = "openai",
    request_body = RerankRequest,
    responses(
        (status = 200, body = RerankResponse),
        (status = 400, body = ErrorResponse),
        (status = 404, body = ErrorResponse),
        (status = 429, body = ErrorResponse),
    )
)]
pub async fn handle(
    State(s): State<AppState>,
    Json(r): Json<RerankRequest>,
) -> Result<axum::Json<RerankResponse>, ApiError> {
    s.check_open()?;
    let Some((yes, no)) = s.rerank else {
        return Err(bad(
            "model",
            format!(
                "`{}` is not served as a reranker; start the server with --rerank",
                s.model_name
            ),
        ));
    };
    check_model(r.model.as_deref(), &s.model_name)?;
    if r.query.is_empty() {
        return Err(bad("query", "`query` must not be empty"));
    }
    if r.documents.is_empty() || r.documents.len() > MAX_DOCUMENTS {
        return Err(bad(
            "documents",
            format!(
                "`documents` must hold 1 to {MAX_DOCUMENTS} texts, got {}",
                r.documents.len()
            ),
        ));
    }
    let top_n = match r.top_n {
        None => r.documents.len(),
        Some(n) if n >= 1 => (n as usize).min(r.documents.len()),
        Some(n) => return Err(bad("top_n", format!("`top_n` must be at least 1, got {n}"))),
    };
    let st = s.clone();
    let docs = r.documents.clone();
    let instruction = r
        .instruction
        .clone()
        .unwrap_or_else(|| DEFAULT_INSTRUCTION.into());
    let query = r.query.clone();
    let prompts = off_thread(move || -> Result<Vec<Vec<u32>>, ApiError> {
        let mut out = Vec::new();
        for (i, d) in docs.iter().enumerate() {
            let ids = st.tokenizer.encode(&prompt(&instruction, &query, d))?;
            if ids.len() > st.limits.context {
                return Err(bad(
                    "documents",
                    format!(
                        "document {i} makes a prompt of {} tokens, more than the context of {}",
                        ids.len(),
                        st.limits.context
                    ),
                ));
            }
            out.push(ids);
        }
        Ok(out)
    })
    .await?;
    let tokens: usize = prompts.iter().map(Vec::len).sum();
    let logits = s.engine.last_logits(prompts, vec![yes, no]).await?;
    let mut results: Vec<RerankResult> = logits
        .iter()
        .enumerate()
        .map(|(index, l)| {
            // P(yes) over yes and no: a softmax of two logits.
            let score = 1.0 / (1.0 + ((l[1] - l[0]) as f64).exp());
            RerankResult {
                index,
                relevance_score: score,
                document: (r.return_documents != Some(false)).then(|| RerankDocument {
                    text: r.documents[index].clone(),
                }),
            }
        })
        .collect();
    results.sort_by(|a, b| {
        b.relevance_score
            .total_cmp(&a.relevance_score)
            .then(a.index.cmp(&b.index))
    });
    results.truncate(top_n);
    Ok(axum::Json(RerankResponse {
        id: crate::http::generate::object_id("rerank"),
        object: "list",
        model: s.model_name.to_string(),
        results,
        usage: RerankUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    }))
}
