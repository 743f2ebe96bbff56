//! Phi-3 / 3.5 / 4-mini (`phi3`): a pre-norm decoder with a fused `attn_qkv` and a fused
//! gate-up `ffn_up`, RoPE on halves (NeoX, partial rotary for Phi-4-mini), longrope's
//! short frequency factors, SwiGLU, separate output head.

use super::Architecture;
use super::blocks::{Activation, RopeStyle};
use super::decoder::Decoder;
use super::hparams::Hparams;
use crate::error::ModelError;
use crate::gguf::GgufFile;

/// The Phi-3 family.
pub struct Phi3;

impl Architecture for Phi3 {
    fn name(&self) -> &'static str {
        "phi3"
    }

    fn load(&self, file: &GgufFile) -> Result<Decoder, ModelError> {
        // llama.cpp runs Phi-3 without its declared sliding window; so does sluice.
        let hp = Hparams {
            window: None,
            ..Hparams::read(file, 1e-5)?
        };
        Decoder::standard(file, &hp, RopeStyle::Neox, Activation::Silu)
    }
}
