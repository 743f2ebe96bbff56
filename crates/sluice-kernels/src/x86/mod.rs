//! The x86-64 kernels: every function compiled with CPU features, one folder per
//! instruction set (`avx2/`: AVX2 with FMA and F16C; `avx512/`: AVX-512F/BW/VNNI), and
//! what the two attention-tile kernels share (`attention_tile.rs`). The safe wrappers
//! (`attention.rs`, `packed.rs`, `softmax.rs`, ...) dispatch here on `Simd::current`;
//! these files import only the leaf modules `layout` and `plain`, and each other.

mod attention_tile;
pub(crate) mod avx2;
pub(crate) mod avx512;
