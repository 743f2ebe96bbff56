//! The llama architecture (`general.architecture = llama`): Llama 1/2/3.x, Mistral,
//! SmolLM, TinyLlama and the other models GGUF writes as llama. Pre-norm RMSNorm, RoPE on
//! adjacent pairs (the converter permutes Q and K for it; Llama 3's frequency factors
//! from `rope_freqs`), grouped-query attention (Mistral's sliding window when the file
//! declares one), SwiGLU MLP, optionally tied output head.

use super::Architecture;
use super::blocks::{Activation, RopeStyle};
use super::decoder::Decoder;
use super::hparams::Hparams;
use crate::error::ModelError;
use crate::gguf::GgufFile;

/// The llama family.
pub struct Llama;

impl Architecture for Llama {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn load(&self, file: &GgufFile) -> Result<Decoder, ModelError> {
        let hp = Hparams::read(file, 1e-5)?;
        Decoder::standard(file, &hp, RopeStyle::Adjacent, Activation::Silu)
    }
}
