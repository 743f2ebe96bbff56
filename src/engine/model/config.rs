//! Hyper-parameters of a llama-architecture GGUF.

use mistralrs_core::GGUFArchitecture;

use super::gguf::{GgufFile, ModelError};

/// What the forward pass needs to know about the model's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Architecture name from `general.architecture`.
    pub arch: String,
    /// Transformer blocks.
    pub n_layers: usize,
    /// Hidden size.
    pub dim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_heads`).
    pub n_kv_heads: usize,
    /// Size of one head.
    pub head_dim: usize,
    /// Feed-forward hidden size.
    pub ffn_dim: usize,
    /// Vocabulary size (rows of the embedding table).
    pub vocab: usize,
    /// Context length the model was trained for.
    pub train_context: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// Dimensions rotated by RoPE (the head size for llama).
    pub rope_dim: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
}

impl LlamaConfig {
    /// Reads the hyper-parameters, refusing architectures we cannot run.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let arch = file.get_str("general.architecture")?.to_string();
        // mistral.rs's list of GGUF architectures names what we were given; of those,
        // the llama family (Llama, Mistral, SmolLM, TinyLlama... all written as `llama`)
        // is what this forward pass implements.
        match GGUFArchitecture::from_value(&arch) {
            Ok(GGUFArchitecture::Llama) => {}
            Ok(known) => return Err(ModelError::Architecture(known.to_string())),
            Err(_) => return Err(ModelError::Architecture(arch)),
        }
        let key = |k: &str| format!("{arch}.{k}");
        let u = |k: &str| file.get_u64(&key(k)).map(|v| v as usize);
        let dim = u("embedding_length")?;
        let n_heads = u("attention.head_count")?;
        let n_kv_heads = u("attention.head_count_kv").unwrap_or(n_heads);
        let head_dim = dim / n_heads;
        let (_, embd_dims, _) = file.tensor("token_embd.weight")?;
        let vocab = embd_dims[0];
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 || dim % n_heads != 0 {
            return Err(ModelError::Metadata(format!(
                "{arch}.attention.head_count ({n_heads}) / head_count_kv ({n_kv_heads})"
            )));
        }
        Ok(Self {
            n_layers: u("block_count")?,
            dim,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: u("feed_forward_length")?,
            vocab,
            train_context: u("context_length").unwrap_or(2048),
            rope_base: file.get_f32(&key("rope.freq_base")).unwrap_or(10_000.0),
            rope_dim: u("rope.dimension_count").unwrap_or(head_dim),
            rms_eps: file
                .get_f32(&key("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-5),
            arch,
        })
    }
}
