//! Qwen 2 / 2.5 (`qwen2`: Q/K/V biases) and Qwen 3 (`qwen3`: per-head QK-norm, no
//! biases): pre-norm decoders with RoPE on halves (NeoX), SwiGLU, tied or separate output
//! head. Which options a layer has is read off its tensors, so both load alike.

use super::Architecture;
use super::blocks::{Activation, RopeStyle};
use super::decoder::Decoder;
use super::hparams::Hparams;
use crate::error::ModelError;
use crate::gguf::GgufFile;

/// A Qwen family by its `general.architecture` name (`qwen2` or `qwen3`).
pub struct Qwen(pub &'static str);

impl Architecture for Qwen {
    fn name(&self) -> &'static str {
        self.0
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
