//! Qwen 2 / 2.5 (`qwen2`: Q/K/V biases) and Qwen 3 (`qwen3`: per-head QK-norm, no
//! biases): pre-norm decoders with RoPE on halves (NeoX), SwiGLU, tied or separate output
//! head. Which options a layer has is read off its tensors.

use super::Architecture;
use super::blocks::{Activation, RopeStyle};
use super::decoder::Decoder;
use super::hparams::Hparams;
use crate::gguf::{GgufFile, ModelError};

/// Qwen 2 and 2.5.
pub struct Qwen2;
/// Qwen 3 (dense).
pub struct Qwen3;

impl Architecture for Qwen2 {
    fn name(&self) -> &'static str {
        "qwen2"
    }

    fn load(&self, file: &GgufFile) -> Result<Decoder, ModelError> {
        // llama.cpp runs this family without a sliding window; so does sluice.
        let hp = Hparams {
            window: None,
            ..Hparams::read(file, 1e-6)?
        };
        Decoder::standard(file, &hp, RopeStyle::Neox, Activation::Silu)
    }
}

impl Architecture for Qwen3 {
    fn name(&self) -> &'static str {
        "qwen3"
    }

    fn load(&self, file: &GgufFile) -> Result<Decoder, ModelError> {
        // llama.cpp runs this family without a sliding window; so does sluice.
        let hp = Hparams {
            window: None,
            ..Hparams::read(file, 1e-6)?
        };
        Decoder::standard(file, &hp, RopeStyle::Neox, Activation::Silu)
    }
}
