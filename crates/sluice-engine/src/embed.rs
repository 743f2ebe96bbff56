//! Embeddings and scores (docs/ARCHITECTURE.md, "Embeddings"): each input runs through the
//! model as a prefill in a scratch slab (no keys or values kept, no slot taken), on the
//! engine thread between steps; its final hidden states (after the output norm) are pooled
//! into one vector of unit length, or its last position's logits of some tokens are read
//! (a reranker's yes/no answer), or its last position's hidden state goes through the
//! file's classification head (a reranker with one).

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::class_head::ClassHead;

use crate::error::EngineError;
use crate::gguf::GgufFile;
use crate::kv::{KvSlab, TokenRow};
use crate::model::Model;

/// How an input's hidden states become one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over its tokens.
    Mean,
    /// Its first token's.
    Cls,
    /// Its last token's (Qwen3-Embedding's recipe).
    Last,
}

impl Pooling {
    /// The pooling named by `--pooling`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "mean" => Some(Self::Mean),
            "cls" => Some(Self::Cls),
            "last" => Some(Self::Last),
            _ => None,
        }
    }

    /// The pooling a model file declares (`{arch}.pooling_type`, llama.cpp's numbering:
    /// 1 mean, 2 cls, 3 last), if it declares one of these.
    pub fn of_file(file: &GgufFile) -> Option<Self> {
        let arch = file.get_str("general.architecture").ok()?;
        match file.get_u64(&format!("{arch}.pooling_type")).ok()? {
            1 => Some(Self::Mean),
            2 => Some(Self::Cls),
            3 => Some(Self::Last),
            _ => None,
        }
    }

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
            Self::Last => "last",
        }
    }
}

/// What a job reads out of each input.
#[derive(Clone, Debug)]
pub(crate) enum Readout {
    /// The pooled, unit-length hidden state.
    Pool(Pooling),
    /// The last position's logits of these tokens.
    Logits(Vec<u32>),
    /// The classification head's outputs at the last position.
    Classify(Arc<ClassHead>),
}

/// An embedding or scoring request on its way to the engine thread.
pub(crate) struct EmbedJob {
    pub inputs: Vec<Vec<u32>>,
    pub readout: Readout,
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, EngineError>>,
}

/// What `readout` asks of each input, running at most `budget` token rows per forward
/// pass (a longer input runs in several, in order).
pub(crate) fn embed(
    model: &dyn Model,
    inputs: &[Vec<u32>],
    readout: &Readout,
    budget: usize,
) -> Vec<Vec<f32>> {
    let pooling = match readout {
        Readout::Pool(p) => *p,
        Readout::Classify(_) => Pooling::Last,
        Readout::Logits(ids) => return logits(model, inputs, ids, budget),
    };
    let s = model.shape().clone();
    let budget = budget.max(1);
    let mut out = Vec::with_capacity(inputs.len());
    // Inputs grouped so a group's tokens fit the budget (an input longer than it alone).
    let mut start = 0;
    while start < inputs.len() {
        let mut end = start + 1;
        let mut tokens = inputs[start].len();
        while end < inputs.len() && tokens + inputs[end].len() <= budget {
            tokens += inputs[end].len();
            end += 1;
        }
        let group = &inputs[start..end];
        let longest = group.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let mut kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, group.len(), longest);
        let rows: Vec<TokenRow> = group
            .iter()
            .enumerate()
            .flat_map(|(slot, ids)| {
                ids.iter()
                    .enumerate()
                    .map(move |(pos, &token)| TokenRow { token, slot, pos })
            })
            .collect();
        let mut sums: Vec<Vec<f64>> = vec![Vec::new(); group.len()];
        let mut hidden = Vec::new();
        for chunk in rows.chunks(budget) {
            let want: Vec<usize> = chunk
                .iter()
                .enumerate()
                .filter(|(_, r)| match pooling {
                    Pooling::Mean => true,
                    Pooling::Cls => r.pos == 0,
                    Pooling::Last => r.pos + 1 == group[r.slot].len(),
                })
                .map(|(i, _)| i)
                .collect();
            model.hidden_into(&mut kv, chunk, &want, &mut hidden);
            if want.is_empty() || hidden.is_empty() {
                continue;
            }
            let dim = hidden.len() / want.len();
            for (&i, h) in want.iter().zip(hidden.chunks_exact(dim)) {
                let sum = &mut sums[chunk[i].slot];
                sum.resize(dim, 0.0);
                for (a, &b) in sum.iter_mut().zip(h) {
                    *a += b as f64;
                }
            }
        }
        for (sum, ids) in sums.into_iter().zip(group) {
            let count = match pooling {
                Pooling::Mean => ids.len().max(1) as f64,
                _ => 1.0,
            };
            let v: Vec<f64> = sum.into_iter().map(|x| x / count).collect();
            if let Readout::Classify(head) = readout {
                let h: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                out.push(head.apply(&h));
                continue;
            }
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            out.push(v.into_iter().map(|x| (x * scale) as f32).collect());
        }
        start = end;
    }
    out
}

/// The last position's logits of `ids`, for each input, each input in its own scratch
/// slab (in passes of at most `budget` rows).
fn logits(model: &dyn Model, inputs: &[Vec<u32>], ids: &[u32], budget: usize) -> Vec<Vec<f32>> {
    let s = model.shape().clone();
    let mut out = Vec::with_capacity(inputs.len());
    let mut buf = Vec::new();
    for input in inputs {
        let mut kv =
            KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, 1, input.len().max(1));
        let rows: Vec<TokenRow> = input
            .iter()
            .enumerate()
            .map(|(pos, &token)| TokenRow {
                token,
                slot: 0,
                pos,
            })
            .collect();
        let mut picked = vec![f32::NAN; ids.len()];
        for chunk in rows.chunks(budget.max(1)) {
            let last = chunk.last().is_some_and(|r| r.pos + 1 == input.len());
            let want: Vec<usize> = if last {
                vec![chunk.len() - 1]
            } else {
                Vec::new()
            };
            model.forward_into(&mut kv, chunk, &want, &mut buf);
            if last && buf.len() >= s.vocab {
                picked = ids
                    .iter()
                    .map(|&t| buf.get(t as usize).copied().unwrap_or(f32::NAN))
                    .collect();
            }
        }
        out.push(picked);
    }
    out
}
