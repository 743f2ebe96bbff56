//! Checks of an embeddings request: its inputs as token ids, within the context.

use sluice_engine::Tokenizer;

use super::{Limits, ValidationError, check_model};
use crate::api::embeddings::{EmbeddingInput, EmbeddingRequest};

/// Inputs one request may hold (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// A checked embeddings request.
#[derive(Clone, Debug, PartialEq)]
pub struct EmbedPlan {
    /// Each input's token ids.
    pub inputs: Vec<Vec<u32>>,
    /// Answer in base64.
    pub base64: bool,
    /// Dimensions to keep (`None`: all).
    pub dimensions: Option<usize>,
}

fn bad(param: &'static str, m: impl Into<String>) -> ValidationError {
    ValidationError::invalid(param, m)
}

/// Checks `r` against the tokenizer and limits.
pub fn embeddings(
    r: &EmbeddingRequest,
    tok: &Tokenizer,
    limits: &Limits,
    served: &str,
) -> Result<EmbedPlan, ValidationError> {
    check_model(r.model.as_deref(), served)?;
    let base64 = match r.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(bad(
                "encoding_format",
                format!("`encoding_format` must be float or base64, got `{other}`"),
            ));
        }
    };
    let dimensions = match r.dimensions {
        None => None,
        Some(d) if d >= 1 => Some(d as usize),
        Some(d) => {
            return Err(bad(
                "dimensions",
                format!("`dimensions` must be at least 1, got {d}"),
            ));
        }
    };
    let vocab = tok.token_bytes().len();
    let ids = |list: &[i64]| -> Result<Vec<u32>, ValidationError> {
        list.iter()
            .map(|&t| {
                u32::try_from(t)
                    .ok()
                    .filter(|&t| (t as usize) < vocab)
                    .ok_or_else(|| bad("input", format!("token id {t} is not in the vocabulary")))
            })
            .collect()
    };
    let text = |t: &String| -> Result<Vec<u32>, ValidationError> {
        if t.is_empty() {
            return Err(bad("input", "an input must not be empty"));
        }
        Ok(tok.encode(t)?)
    };
    let inputs: Vec<Vec<u32>> = match &r.input {
        EmbeddingInput::Text(t) => vec![text(t)?],
        EmbeddingInput::Ids(list) => vec![ids(list)?],
        EmbeddingInput::Texts(list) => list.iter().map(text).collect::<Result<_, _>>()?,
        EmbeddingInput::IdLists(lists) => lists.iter().map(|l| ids(l)).collect::<Result<_, _>>()?,
    };
    if inputs.is_empty() || inputs.iter().any(Vec::is_empty) {
        return Err(bad(
            "input",
            "`input` must hold at least one non-empty input",
        ));
    }
    if inputs.len() > MAX_INPUTS {
        return Err(bad(
            "input",
            format!(
                "`input` holds {} inputs, more than {MAX_INPUTS}",
                inputs.len()
            ),
        ));
    }
    if let Some((i, long)) = inputs
        .iter()
        .enumerate()
        .find(|(_, x)| x.len() > limits.context)
    {
        return Err(bad(
            "input",
            format!(
                "input {i} has {} tokens, more than the context of {} tokens",
                long.len(),
                limits.context
            ),
        ));
    }
    Ok(EmbedPlan {
        inputs,
        base64,
        dimensions,
    })
}
