//! Gemma 3 (`general.architecture = gemma3`, text part). Per layer: RMSNorm →
//! attention → RMSNorm → residual, RMSNorm → GeGLU (tanh GELU) → RMSNorm → residual.
//! Queries and keys are RMS-normed per head before RoPE (on halves); scores are scaled
//! by `1/sqrt(head_dim)` (`query_pre_attn_scalar`). Layers alternate sliding-window
//! attention (window from the file, 512 for the small models) with a global layer every
//! `sliding_window_pattern` (6) layers; local layers use RoPE base 10,000 and no scaling,
//! global ones the file's base and scaling. Embeddings are multiplied by `sqrt(dim)`; the
//! output head is tied to them. GGUF norm weights already hold Gemma's `1 + w`.

use super::Architecture;
use super::attention::AttentionOptions;
use super::blocks::{Activation, RopeScaling, RopeStyle};
use super::decoder::{Decoder, Layer};
use super::hparams::Hparams;
use super::tensors::{matrix, optional_matrix};
use crate::error::ModelError;
use crate::gguf::GgufFile;
use candle_core::quantized::gguf_file::Value;

/// The Gemma 3 family.
pub struct Gemma3;

/// RoPE base of the sliding-window layers when the file does not say.
const LOCAL_ROPE_BASE: f32 = 10_000.0;
/// One global layer in this many when the file does not say.
const PATTERN: usize = 6;

/// Which layers use the sliding window: the file's per-layer array, or every layer but
/// each `n`-th.
fn sliding_layers(file: &GgufFile, n_layers: usize) -> Vec<bool> {
    let key = "gemma3.attention.sliding_window_pattern";
    if let Ok(Value::Array(a)) = file.get(key) {
        let v: Vec<bool> = a.iter().map(|x| matches!(x, Value::Bool(true))).collect();
        if v.len() >= n_layers {
            return v;
        }
    }
    let n = file.get_u64(key).map_or(PATTERN, |v| v as usize);
    (0..n_layers).map(|l| n == 0 || l % n < n - 1).collect()
}

impl Architecture for Gemma3 {
    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn load(&self, file: &GgufFile) -> Result<Decoder, ModelError> {
        let hp = Hparams::read(file, 1e-6)?;
        let global = hp.rope(RopeStyle::Neox);
        let local_base = file
            .get_f32("gemma3.rope.freq_base_swa")
            .unwrap_or(LOCAL_ROPE_BASE);
        let local = hp.rope_with(RopeStyle::Neox, local_base, RopeScaling::None);
        let sliding = match hp.window {
            Some(_) => sliding_layers(file, hp.n_layers),
            None => vec![false; hp.n_layers],
        };
        let softcap = file
            .get_f32("gemma3.final_logit_softcapping")
            .ok()
            .filter(|&c| c > 0.0);
        // 1/sqrt(query_pre_attn_scalar): a folder's value, else as llama.cpp infers it
        // (the 27B model, 62 layers, scales by width / heads; the others by head size).
        let scalar = match file.get_f32("gemma3.attention.query_pre_attn_scalar") {
            Ok(q) if q > 0.0 => q,
            _ if hp.n_layers == 62 => (hp.dim / hp.n_heads) as f32,
            _ => hp.head_dim as f32,
        };
        let mut layers = Vec::with_capacity(hp.n_layers);
        for (l, &swa) in sliding.iter().enumerate().take(hp.n_layers) {
            let p = |s: &str| format!("blk.{l}.{s}.weight");
            let options = AttentionOptions {
                window: if swa { hp.window } else { None },
                softcap: None,
                scale: Some(1.0 / scalar.sqrt()),
            };
            let rope = if swa { local.clone() } else { global.clone() };
            let attn = hp.attention(file, l, rope, options)?;
            if attn.qk_norm.is_none() {
                return Err(ModelError::MissingTensor(p("attn_q_norm")));
            }
            layers.push(Layer {
                attn_norm: hp.norm(file, &p("attn_norm"), hp.dim)?,
                attn,
                post_attn_norm: Some(hp.norm(file, &p("post_attention_norm"), hp.dim)?),
                ffn_norm: hp.norm(file, &p("ffn_norm"), hp.dim)?,
                mlp: hp.mlp(file, l, Activation::Gelu)?,
                post_ffn_norm: Some(hp.norm(file, &p("post_ffw_norm"), hp.dim)?),
            });
        }
        Ok(Decoder {
            shape: hp.shape(),
            embed: matrix(file, "token_embd.weight", hp.vocab, hp.dim)?,
            embed_scale: Some((hp.dim as f32).sqrt()),
            layers,
            out_norm: hp.norm(file, "output_norm.weight", hp.dim)?,
            head: optional_matrix(file, "output.weight", hp.vocab, hp.dim)?,
            final_softcap: softcap,
        })
    }
}
