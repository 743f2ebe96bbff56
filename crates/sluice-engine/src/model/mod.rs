//! The model layer: the [`Model`] trait the engine drives, the [`Architecture`] registry
//! keyed on GGUF `general.architecture`, and the shared blocks architectures are built
//! from (`blocks.rs`, `attention.rs`) into one decoder-only transformer (`decoder.rs`).
//!
//! Adding a family is a small file like `llama.rs`: read the hyper-parameters, name the
//! tensors, choose the block options (norm style, RoPE style, attention options, MLP
//! activation), and add it to [`ARCHITECTURES`].

mod attention;
pub mod blocks;
mod decoder;
#[cfg(test)]
pub(crate) mod fake;
mod gemma3;
mod hparams;
mod llama;
mod phi3;
mod qwen;
pub(crate) mod tensors;

use std::sync::OnceLock;

pub use attention::set_split_below;
pub use decoder::Decoder;

use crate::error::ModelError;
use crate::gguf::GgufFile;
use crate::kv::KvSlab;
pub use crate::kv::TokenRow;

/// What the engine needs to know about a model's shape: the KV slab's dimensions and the
/// width of a logits row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Architecture name from `general.architecture`.
    pub arch: String,
    /// Transformer blocks (KV layers).
    pub n_layers: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Size of one key or value head.
    pub head_dim: usize,
    /// Logits per row.
    pub vocab: usize,
    /// Context length the model was trained for.
    pub train_context: usize,
    /// Context at which one row's attention costs about as much as its weight matmuls (0:
    /// unknown, every row costs the same). Prompt chunks are sized with it
    /// (`scheduler::chunk_rows`).
    pub attention_break_even: usize,
}

/// A model the engine can run. The engine thread owns it; `forward` is the only compute.
pub trait Model: Send + Sync {
    /// Its shape.
    fn shape(&self) -> &Shape;

    /// Runs `rows` through the model, writing their keys and values into `kv` at
    /// `(slot, pos)` before attention, each row attending to positions `0..=pos` of its
    /// own slot, and puts the logits of the rows listed in `want` into `logits`, resized
    /// to `want.len() x vocab`, in that order. A row's numbers must not depend on the other
    /// rows. A caller that runs step after step keeps one buffer: 32 rows of a
    /// 262,144-token vocabulary are 34 MB, which the allocator would otherwise map afresh
    /// and the kernel zero on every step.
    fn forward_into(
        &self,
        kv: &mut KvSlab,
        rows: &[TokenRow],
        want: &[usize],
        logits: &mut Vec<f32>,
    );

    /// As `forward_into`, but puts the final hidden states (after the output norm, before
    /// the head) of the rows in `want` into `out`, `want.len() x dim`: what embeddings pool.
    /// A model that has none (a test double) leaves `out` empty.
    fn hidden_into(&self, kv: &mut KvSlab, rows: &[TokenRow], want: &[usize], out: &mut Vec<f32>) {
        let _ = (kv, rows, want);
        out.clear();
    }

    /// `forward_into` a new buffer.
    fn forward(&self, kv: &mut KvSlab, rows: &[TokenRow], want: &[usize]) -> Vec<f32> {
        let mut logits = Vec::new();
        self.forward_into(kv, rows, want, &mut logits);
        logits
    }
}

/// A model family: turns a GGUF file into a [`Decoder`].
pub trait Architecture: Sync {
    /// The `general.architecture` value it reads.
    fn name(&self) -> &'static str;
    /// Reads the hyper-parameters and tensors.
    fn load(&self, file: &GgufFile) -> Result<Decoder, ModelError>;
}

/// Every architecture sluice runs.
pub static ARCHITECTURES: &[&dyn Architecture] = &[
    &llama::Llama,
    &gemma3::Gemma3,
    &qwen::Qwen("qwen2"),
    &qwen::Qwen("qwen3"),
    &phi3::Phi3,
];

/// The architecture of `file`, or an error naming what the file says it is.
pub fn architecture(file: &GgufFile) -> Result<&'static dyn Architecture, ModelError> {
    let arch = file.get_str("general.architecture")?;
    ARCHITECTURES
        .iter()
        .copied()
        .find(|a| a.name() == arch)
        .ok_or_else(|| ModelError::Architecture {
            found: arch.to_string(),
            supported: ARCHITECTURES.iter().map(|a| a.name()).collect(),
        })
}

/// Loads the model in `file` with its architecture's loader.
pub fn load(file: &GgufFile) -> Result<Box<dyn Model>, ModelError> {
    Ok(Box::new(architecture(file)?.load(file)?))
}

/// The threads that compute grammar masks beside a forward pass (`RAYON_NUM_THREADS`,
/// else one per CPU). The forward pass itself runs on `sluice_kernels::threads`.
pub(crate) fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("sluice-compute-{i}"))
            .build()
            .expect("the compute threads start (a failure here is fatal at start-up)")
    })
}
