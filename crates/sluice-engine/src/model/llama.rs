//! The llama architecture (`general.architecture = llama`): Llama 1/2, Mistral, SmolLM,
//! TinyLlama and the other models GGUF writes as llama. Pre-norm RMSNorm, RoPE on
//! adjacent pairs (the converter permutes Q and K for it), grouped-query attention,
//! SwiGLU MLP, optionally tied output head.

use super::attention::{Attention, AttentionOptions};
use super::blocks::{Activation, Mlp, RmsNorm, Rope, RopeScaling, RopeStyle};
use super::decoder::{Decoder, Layer};
use super::tensors::{matrix, optional_matrix, vector};
use super::{Architecture, Shape};
use crate::gguf::{GgufFile, ModelError};

/// The llama family.
pub struct Llama;

/// Hyper-parameters read from `llama.*` metadata.
struct Config {
    n_layers: usize,
    dim: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    ffn_dim: usize,
    vocab: usize,
    train_context: usize,
    rope: Rope,
    rms_eps: f32,
}

impl Config {
    fn read(file: &GgufFile) -> Result<Self, ModelError> {
        let key = |k: &str| format!("llama.{k}");
        let u = |k: &str| file.get_u64(&key(k)).map(|v| v as usize);
        let dim = u("embedding_length")?;
        let n_heads = u("attention.head_count")?;
        let n_kv_heads = u("attention.head_count_kv").unwrap_or(n_heads);
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 || dim % n_heads != 0 {
            return Err(ModelError::Metadata(format!(
                "llama.attention.head_count ({n_heads}) / head_count_kv ({n_kv_heads})"
            )));
        }
        let head_dim = dim / n_heads;
        let (_, embd_dims, _) = file.tensor("token_embd.weight")?;
        let scaling = match (
            file.get_str(&key("rope.scaling.type")),
            file.get_f32(&key("rope.scaling.factor")),
        ) {
            (Ok("linear"), Ok(f)) if f > 0.0 => RopeScaling::Linear { factor: f as f64 },
            _ => RopeScaling::None,
        };
        let rope_dim = u("rope.dimension_count").unwrap_or(head_dim);
        Ok(Self {
            n_layers: u("block_count")?,
            dim,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim: u("feed_forward_length")?,
            vocab: embd_dims[0],
            train_context: u("context_length").unwrap_or(2048),
            rope: Rope::new(
                rope_dim,
                file.get_f32(&key("rope.freq_base")).unwrap_or(10_000.0),
                RopeStyle::Adjacent,
                scaling,
            ),
            rms_eps: file
                .get_f32(&key("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-5),
        })
    }
}

impl Architecture for Llama {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn load(&self, file: &GgufFile) -> Result<Decoder, ModelError> {
        let c = Config::read(file)?;
        let (q_dim, kv_dim) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let mut layers = Vec::with_capacity(c.n_layers);
        for l in 0..c.n_layers {
            let p = |s: &str| format!("blk.{l}.{s}.weight");
            let norm = |s: &str| vector(file, &p(s), c.dim).map(|w| RmsNorm::new(w, c.rms_eps));
            layers.push(Layer {
                attn_norm: norm("attn_norm")?,
                attn: Attention {
                    wq: matrix(file, &p("attn_q"), q_dim, c.dim)?,
                    wk: matrix(file, &p("attn_k"), kv_dim, c.dim)?,
                    wv: matrix(file, &p("attn_v"), kv_dim, c.dim)?,
                    wo: matrix(file, &p("attn_output"), c.dim, q_dim)?,
                    bias: None,
                    qk_norm: None,
                    n_heads: c.n_heads,
                    n_kv_heads: c.n_kv_heads,
                    head_dim: c.head_dim,
                    rope: c.rope.clone(),
                    options: AttentionOptions::default(),
                },
                post_attn_norm: None,
                ffn_norm: norm("ffn_norm")?,
                mlp: Mlp {
                    gate: matrix(file, &p("ffn_gate"), c.ffn_dim, c.dim)?,
                    up: matrix(file, &p("ffn_up"), c.ffn_dim, c.dim)?,
                    down: matrix(file, &p("ffn_down"), c.dim, c.ffn_dim)?,
                    act: Activation::Silu,
                },
                post_ffn_norm: None,
            });
        }
        Ok(Decoder {
            shape: Shape {
                arch: "llama".into(),
                n_layers: c.n_layers,
                n_kv_heads: c.n_kv_heads,
                head_dim: c.head_dim,
                vocab: c.vocab,
                train_context: c.train_context,
            },
            embed: matrix(file, "token_embd.weight", c.vocab, c.dim)?,
            embed_scale: None,
            layers,
            out_norm: RmsNorm::new(vector(file, "output_norm.weight", c.dim)?, c.rms_eps),
            head: optional_matrix(file, "output.weight", c.vocab, c.dim)?,
            final_softcap: None,
        })
    }
}
