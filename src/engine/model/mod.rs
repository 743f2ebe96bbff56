//! The model runtime: llama-architecture GGUF weights and their forward pass.

pub mod acts;
pub mod attention;
pub mod config;
mod formats;
mod forward;
pub mod gguf;
pub mod kernels;
pub mod linear;
pub mod packed;
#[cfg(target_arch = "x86_64")]
mod packed_x86;

use std::path::Path;

pub use config::LlamaConfig;
pub use forward::TokenRow;
pub use gguf::{GgufFile, ModelError};
use linear::QLinear;

/// One transformer block's weights.
pub struct Layer {
    attn_norm: Vec<f32>,
    wq: QLinear,
    wk: QLinear,
    wv: QLinear,
    wo: QLinear,
    ffn_norm: Vec<f32>,
    gate: QLinear,
    up: QLinear,
    down: QLinear,
}

/// All parameter tensors. Weights are state, not structure (E20): a reload builds a new
/// `Weights` with the same shapes and swaps it in.
pub struct Weights {
    embed: QLinear,
    layers: Vec<Layer>,
    out_norm: Vec<f32>,
    /// `None` when the output head is tied to the embedding table.
    head: Option<QLinear>,
}

/// A loaded model: hyper-parameters and weights.
pub struct Model {
    /// Hyper-parameters read from the file.
    pub config: LlamaConfig,
    weights: Weights,
}

fn vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let t = QLinear::load_vector(file, name)?;
    if t.len() != len {
        return Err(ModelError::Shape {
            name: name.into(),
            found: vec![t.len()],
            expected: vec![len],
        });
    }
    Ok(t)
}

impl Weights {
    /// Loads every tensor of a llama-architecture file, checking shapes against `c`.
    pub fn load(file: &GgufFile, c: &LlamaConfig) -> Result<Self, ModelError> {
        let kv_dim = c.n_kv_heads * c.head_dim;
        let q_dim = c.n_heads * c.head_dim;
        let mut layers = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let p = |s: &str| format!("blk.{l}.{s}.weight");
            let lin = |s: &str, r, k| QLinear::load(file, &p(s), Some((r, k)));
            layers.push(Layer {
                attn_norm: vector(file, &p("attn_norm"), c.dim)?,
                wq: lin("attn_q", q_dim, c.dim)?,
                wk: lin("attn_k", kv_dim, c.dim)?,
                wv: lin("attn_v", kv_dim, c.dim)?,
                wo: lin("attn_output", c.dim, q_dim)?,
                ffn_norm: vector(file, &p("ffn_norm"), c.dim)?,
                gate: lin("ffn_gate", c.ffn_dim, c.dim)?,
                up: lin("ffn_up", c.ffn_dim, c.dim)?,
                down: lin("ffn_down", c.dim, c.ffn_dim)?,
            });
        }
        let head = match file.content.tensor_infos.contains_key("output.weight") {
            true => Some(QLinear::load(
                file,
                "output.weight",
                Some((c.vocab, c.dim)),
            )?),
            false => None,
        };
        Ok(Self {
            embed: QLinear::load(file, "token_embd.weight", Some((c.vocab, c.dim)))?,
            layers,
            out_norm: vector(file, "output_norm.weight", c.dim)?,
            head,
        })
    }
}

impl Model {
    /// Memory-maps and loads a GGUF model.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let file = GgufFile::open(path)?;
        Self::from_file(&file)
    }

    /// Loads from an already opened file (the tokenizer reads the same header).
    pub fn from_file(file: &GgufFile) -> Result<Self, ModelError> {
        let config = LlamaConfig::from_gguf(file)?;
        let weights = Weights::load(file, &config)?;
        Ok(Self { config, weights })
    }

    /// Replaces the weights (same shapes are the caller's guarantee) and returns the old.
    pub fn swap_weights(&mut self, weights: Weights) -> Weights {
        std::mem::replace(&mut self.weights, weights)
    }
}
