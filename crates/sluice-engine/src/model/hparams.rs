//! Hyper-parameters every family reads from `{arch}.*` metadata, and the per-layer
//! tensor loaders the family files share (attention with optional bias, QK-norm or a
//! fused QKV tensor; gated MLP with separate or fused gate/up).

use super::attention::{Attention, AttentionOptions};
use super::blocks::{Activation, Mlp, RmsNorm, Rope, RopeScaling, RopeStyle};
use super::tensors::{matrix, matrix_rows, vector};
use crate::error::ModelError;
use crate::gguf::GgufFile;

/// Most blocks a model may have (the largest released models have under 200).
const MAX_LAYERS: usize = 1 << 12;
/// Widest residual stream or MLP.
const MAX_WIDTH: usize = 1 << 20;
/// Most attention heads.
const MAX_HEADS: usize = 1 << 12;
/// Largest head.
const MAX_HEAD_DIM: usize = 1 << 12;

/// The shared hyper-parameters.
#[derive(Clone, Debug)]
pub struct Hparams {
    /// `general.architecture`.
    pub arch: String,
    /// Blocks.
    pub n_layers: usize,
    /// Residual width.
    pub dim: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Size of one head (`attention.key_length`, else `dim / n_heads`).
    pub head_dim: usize,
    /// MLP hidden width.
    pub ffn_dim: usize,
    /// Rows of the embedding table.
    pub vocab: usize,
    /// Trained context.
    pub train_context: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// Rotated dimensions per head.
    pub rope_dim: usize,
    /// RoPE scaling the file declares.
    pub rope_scaling: RopeScaling,
    /// Factor on RoPE's cos and sin (`rope.scaling.attn_factor`).
    pub rope_mscale: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Sliding window, when the file has one.
    pub window: Option<usize>,
}

impl Hparams {
    /// Reads `{arch}.*`; `default_eps` when the file has no epsilon.
    pub fn read(file: &GgufFile, default_eps: f32) -> Result<Self, ModelError> {
        let arch = file.get_str("general.architecture")?.to_string();
        let key = |k: &str| format!("{arch}.{k}");
        let u = |k: &str| file.get_u64(&key(k)).map(|v| v as usize);
        let dim = u("embedding_length")?;
        let n_heads = u("attention.head_count")?;
        let n_kv_heads = u("attention.head_count_kv").unwrap_or(n_heads);
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 {
            return Err(ModelError::Metadata(format!(
                "{arch}.attention.head_count ({n_heads}) / head_count_kv ({n_kv_heads})"
            )));
        }
        let (n_layers, ffn_dim) = (u("block_count")?, u("feed_forward_length")?);
        // Sizes are allocated from before any tensor is checked against them (a layer
        // list, per-layer flags): a crafted file must not turn them into an abort.
        for (name, value, limit) in [
            ("block_count", n_layers, MAX_LAYERS),
            ("embedding_length", dim, MAX_WIDTH),
            ("feed_forward_length", ffn_dim, MAX_WIDTH),
            ("attention.head_count", n_heads, MAX_HEADS),
        ] {
            if value > limit {
                return Err(ModelError::Unsupported(format!(
                    "{arch}.{name} is {value}, over sluice's limit of {limit}"
                )));
            }
        }
        let head_dim = match u("attention.key_length") {
            Ok(k) => k,
            Err(_) if dim % n_heads == 0 => dim / n_heads,
            Err(_) => return Err(ModelError::Metadata(key("attention.key_length"))),
        };
        if head_dim == 0 || head_dim % 2 != 0 || head_dim > MAX_HEAD_DIM {
            return Err(ModelError::Metadata(format!("{arch} head size {head_dim}")));
        }
        let (_, embd_dims, _) = file.tensor("token_embd.weight")?;
        let rope_dim = u("rope.dimension_count").unwrap_or(head_dim).min(head_dim);
        Ok(Self {
            n_layers,
            dim,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn_dim,
            vocab: embd_dims[0],
            train_context: u("context_length").unwrap_or(2048),
            rope_base: file.get_f32(&key("rope.freq_base")).unwrap_or(10_000.0),
            rope_dim,
            rope_scaling: rope_scaling(file, &arch)?,
            rope_mscale: file
                .get_f32(&key("rope.scaling.attn_factor"))
                .unwrap_or(1.0),
            rms_eps: file
                .get_f32(&key("attention.layer_norm_rms_epsilon"))
                .unwrap_or(default_eps),
            window: u("attention.sliding_window").ok().filter(|&w| w > 0),
            arch,
        })
    }

    /// The engine's view of the shape.
    pub fn shape(&self) -> super::Shape {
        super::Shape {
            arch: self.arch.clone(),
            n_layers: self.n_layers,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            vocab: self.vocab,
            train_context: self.train_context,
            attention_break_even: self.attention_break_even(),
        }
    }

    /// The context at which a row's attention (scores and weighted values over every
    /// earlier position, in f32) takes as long as its weight matmuls (integer dot products,
    /// about twice as fast per multiply-add on the CPU kernels).
    fn attention_break_even(&self) -> usize {
        const ATTENTION_MAC_COST: usize = 2;
        let (d, q, kv) = (
            self.dim,
            self.n_heads * self.head_dim,
            self.n_kv_heads * self.head_dim,
        );
        let per_layer = d * q + 2 * d * kv + q * d + 3 * d * self.ffn_dim;
        let weights = (self.n_layers * per_layer).saturating_add(d.saturating_mul(self.vocab));
        let per_position = ATTENTION_MAC_COST * 2 * self.n_layers * q;
        (weights / per_position.max(1)).max(1)
    }

    /// The rotary embedding with the file's base and scaling.
    pub fn rope(&self, style: RopeStyle) -> Rope {
        self.rope_with(style, self.rope_base, self.rope_scaling.clone())
            .with_mscale(self.rope_mscale)
    }

    /// A rotary embedding over this model's rotated dimensions.
    pub fn rope_with(&self, style: RopeStyle, base: f32, scaling: RopeScaling) -> Rope {
        Rope::new(self.rope_dim, base, style, scaling)
    }

    /// RMSNorm of `name` (width `len`).
    pub fn norm(&self, file: &GgufFile, name: &str, len: usize) -> Result<RmsNorm, ModelError> {
        vector(file, name, len).map(|w| RmsNorm::new(w, self.rms_eps))
    }

    /// Layer `l`'s attention: `attn_q/k/v` or a fused `attn_qkv`, optional biases and
    /// QK-norms as the file has them.
    pub fn attention(
        &self,
        file: &GgufFile,
        l: usize,
        rope: Rope,
        options: AttentionOptions,
    ) -> Result<Attention, ModelError> {
        let p = |s: &str| format!("blk.{l}.{s}");
        let hd = self.head_dim;
        let (q_dim, kv_dim) = (self.n_heads * hd, self.n_kv_heads * hd);
        let (wq, wk, wv) = if file.has_tensor(&p("attn_qkv.weight")) {
            let (name, all) = (p("attn_qkv.weight"), q_dim + 2 * kv_dim);
            (
                matrix_rows(file, &name, 0..q_dim, all, self.dim)?,
                matrix_rows(file, &name, q_dim..q_dim + kv_dim, all, self.dim)?,
                matrix_rows(file, &name, q_dim + kv_dim..all, all, self.dim)?,
            )
        } else {
            (
                matrix(file, &p("attn_q.weight"), q_dim, self.dim)?,
                matrix(file, &p("attn_k.weight"), kv_dim, self.dim)?,
                matrix(file, &p("attn_v.weight"), kv_dim, self.dim)?,
            )
        };
        let bias = match file.has_tensor(&p("attn_q.bias")) {
            true => Some([
                vector(file, &p("attn_q.bias"), q_dim)?,
                vector(file, &p("attn_k.bias"), kv_dim)?,
                vector(file, &p("attn_v.bias"), kv_dim)?,
            ]),
            false => None,
        };
        let qk_norm = match file.has_tensor(&p("attn_q_norm.weight")) {
            true => Some([
                self.norm(file, &p("attn_q_norm.weight"), hd)?,
                self.norm(file, &p("attn_k_norm.weight"), hd)?,
            ]),
            false => None,
        };
        Ok(Attention {
            wq,
            wk,
            wv,
            wo: matrix(file, &p("attn_output.weight"), self.dim, q_dim)?,
            bias,
            qk_norm,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: hd,
            rope,
            options,
        })
    }

    /// Layer `l`'s gated MLP: `ffn_gate` + `ffn_up`, or a fused `ffn_up` holding the gate
    /// in its first half (Phi-3).
    pub fn mlp(&self, file: &GgufFile, l: usize, act: Activation) -> Result<Mlp, ModelError> {
        let p = |s: &str| format!("blk.{l}.{s}.weight");
        let f = self.ffn_dim;
        let (gate, up) = if file.has_tensor(&p("ffn_gate")) {
            (
                matrix(file, &p("ffn_gate"), f, self.dim)?,
                matrix(file, &p("ffn_up"), f, self.dim)?,
            )
        } else {
            (
                matrix_rows(file, &p("ffn_up"), 0..f, 2 * f, self.dim)?,
                matrix_rows(file, &p("ffn_up"), f..2 * f, 2 * f, self.dim)?,
            )
        };
        Ok(Mlp {
            gate,
            up,
            down: matrix(file, &p("ffn_down"), self.dim, f)?,
            act,
        })
    }
}

/// The RoPE scaling `{arch}.rope.scaling.type` declares, or an error naming a kind sluice
/// does not implement.
fn rope_scaling(file: &GgufFile, arch: &str) -> Result<RopeScaling, ModelError> {
    let kind = file
        .get_str(&format!("{arch}.rope.scaling.type"))
        .unwrap_or("none");
    let factor = file
        .get_f32(&format!("{arch}.rope.scaling.factor"))
        .unwrap_or(1.0) as f64;
    // Llama 3 and Phi-3 store their per-pair frequency divisors as tensors.
    let tensor = |name: &str| -> Result<Option<Vec<f32>>, ModelError> {
        match file.tensor(name) {
            Ok((_, dims, _)) => vector(file, name, dims.iter().product()).map(Some),
            Err(_) => Ok(None),
        }
    };
    if let Some(f) = tensor("rope_freqs.weight")? {
        return Ok(RopeScaling::Factors(f));
    }
    if let Some(short) = tensor("rope_factors_short.weight")? {
        // Phi-3's longrope: the long factors when the model's context reaches past the
        // original one (Phi-3.5 and 4: 128k over 4k), as llama.cpp chooses at its default
        // context and as transformers does for any sequence longer than the original
        // context; the short ones otherwise.
        let u = |k: &str| file.get_u64(&format!("{arch}.{k}")).ok();
        let long = match (
            u("context_length"),
            u("rope.scaling.original_context_length"),
        ) {
            (Some(train), Some(orig)) if train > orig => tensor("rope_factors_long.weight")?,
            _ => None,
        };
        return Ok(RopeScaling::Factors(long.unwrap_or(short)));
    }
    match kind {
        "none" => Ok(RopeScaling::None),
        "linear" if factor > 0.0 => Ok(RopeScaling::Linear { factor }),
        "linear" => Ok(RopeScaling::None),
        other => Err(ModelError::Unsupported(format!(
            "RoPE scaling `{other}` ({arch}.rope.scaling.type) is not implemented; \
             sluice runs none, linear, llama3 and Phi-3's longrope factors"
        ))),
    }
}
