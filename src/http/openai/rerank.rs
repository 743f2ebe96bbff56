//! `POST /v1/rerank` (also `/rerank`): documents scored against a query, best first, by a
//! reranker that answers yes or no (the Qwen3-Reranker recipe: its prompt, then P(yes) over
//! yes and no at the last position), or by the file's classification head.

use std::sync::Arc;

use axum::extract::State;
use sluice_engine::ClassHead;

use crate::api::ErrorResponse;
use crate::api::rerank::{
    RerankDocument, RerankRequest, RerankResponse, RerankResult, RerankUsage,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{ServerState, off_thread};
use crate::validation::{ValidationError, check_model};

/// How a model served as a reranker scores a document.
#[derive(Clone, Debug)]
pub enum Reranker {
    /// P(yes) over the logits of `yes` and `no` after the Qwen3-Reranker prompt
    /// (`--rerank`).
    YesNo {
        /// The id of `yes`.
        yes: u32,
        /// The id of `no`.
        no: u32,
    },
    /// The file's classification head on the last position (its own prompt template, or
    /// the query and document as a pair).
    Head(Arc<ClassHead>),
}

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

/// A document's prompt ids for `reranker`. A head's file template has `{query}` and
/// `{document}` filled in (and its default task replaced by `instruction`), tokenised as
/// llama.cpp tokenises it: special tokens parsed, none added.
fn prompt_ids(
    tokenizer: &sluice_engine::Tokenizer,
    reranker: &Reranker,
    instruction: &str,
    query: &str,
    document: &str,
) -> Result<Vec<u32>, ApiError> {
    Ok(match reranker {
        Reranker::YesNo { .. } => tokenizer.encode(&prompt(instruction, query, document))?,
        Reranker::Head(head) => match &head.template {
            Some(t) => {
                let t = t.replace(DEFAULT_INSTRUCTION, instruction);
                tokenizer.encode_with(&fill(&t, query, document), false, true)?
            }
            None => head.pair.join(
                &tokenizer.encode_with(query, false, false)?,
                &tokenizer.encode_with(document, false, false)?,
            ),
        },
    })
}

/// `template` with `{query}` and `{document}` replaced in one pass (a query that holds
/// the text `{document}` stays as it is).
pub fn fill(template: &str, query: &str, document: &str) -> String {
    let mut out = String::with_capacity(template.len() + query.len() + document.len());
    let mut rest = template;
    loop {
        let q = rest.find("{query}").map(|i| (i, "{query}", query));
        let d = rest.find("{document}").map(|i| (i, "{document}", document));
        let next = match (q, d) {
            (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        let Some((i, key, value)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i]);
        out.push_str(value);
        rest = &rest[i + key.len()..];
    }
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
    State(server): State<ServerState>,
    Json(r): Json<RerankRequest>,
) -> Result<axum::Json<RerankResponse>, ApiError> {
    let s = server.model(r.model.as_deref()).await?;
    s.check_open()?;
    let Some(reranker) = s.rerank.clone() else {
        return Err(bad(
            "model",
            format!(
                "`{}` is not served as a reranker; start the server with --rerank, or serve \
                 a file with a classification head",
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
    let how = reranker.clone();
    let prompts = off_thread(move || -> Result<Vec<Vec<u32>>, ApiError> {
        let mut out = Vec::new();
        for (i, d) in docs.iter().enumerate() {
            let ids = prompt_ids(&st.tokenizer, &how, &instruction, &query, d)?;
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
    let scores: Vec<f64> = match &reranker {
        Reranker::YesNo { yes, no } => s
            .engine
            .last_logits(prompts, vec![*yes, *no])
            .await?
            .iter()
            // P(yes) over yes and no: a softmax of two logits.
            .map(|l| 1.0 / (1.0 + ((l[1] - l[0]) as f64).exp()))
            .collect(),
        Reranker::Head(head) => s
            .engine
            .classify(prompts, head.clone())
            .await?
            .iter()
            .map(|o| head.score(o))
            .collect(),
    };
    let mut results: Vec<RerankResult> = scores
        .into_iter()
        .enumerate()
        .map(|(index, score)| RerankResult {
            index,
            relevance_score: score,
            document: (r.return_documents != Some(false)).then(|| RerankDocument {
                text: r.documents[index].clone(),
            }),
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

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn a_template_is_filled_in_one_pass() {
        assert_eq!(fill("Q: {query} D: {document}.", "a", "b"), "Q: a D: b.");
        assert_eq!(
            fill("{document}|{query}", "{document}", "x"),
            "x|{document}",
            "a query's own braces are left alone"
        );
        assert_eq!(fill("none", "a", "b"), "none");
    }
}
