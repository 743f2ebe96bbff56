//! sluice's CPU kernels: every `unsafe` block of the project and all SIMD, behind a safe,
//! slice-based API.
//!
//! - [`Simd`]: the instruction-set level, detected once at start-up (`SLUICE_KERNEL` may
//!   force a lower one). Each kernel dispatches on it.
//! - Files per instruction set: `avx512.rs`, and `avx2.rs` with `avx2_matmul.rs`,
//!   `avx2_acts.rs` and `avx2_rows.rs`, hold every function compiled with those CPU
//!   features; the plain-loop definitions live beside their safe wrappers and are the
//!   portable path.
//! - [`QLinear`]: a weight matrix kept in its GGUF quantisation; `matmul` multiplies it
//!   by f32 activations (int8-quantised once per [`Input`] for the integer kernels).
//! - [`attend_group`]: attention of one GQA group over f16 keys and values;
//!   [`attend_rows`]: of several rows of one slot in one pass.
//! - [`silu_mul`] / [`gelu_mul`], [`exp_fast`], [`dot`]; the vocabulary passes of
//!   sampling: [`max_value`], [`exp_weights`], [`bin_indices`], [`exp_sum`].

mod activation;
mod acts;
mod acts_tiles;
mod alloc;
mod attention;
#[cfg(target_arch = "x86_64")]
mod attention_tile;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_acts;
#[cfg(target_arch = "x86_64")]
mod avx2_matmul;
#[cfg(target_arch = "x86_64")]
mod avx2_rows;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_matmul;
#[cfg(target_arch = "x86_64")]
mod avx512_rows;
mod dense;
mod formats;
mod layout;
mod linear;
mod packed;
mod packed_portable;
mod plain;
mod quantize;
mod simd;
mod softmax;
pub mod threads;

pub use activation::{gelu_mul, silu_mul};
pub use alloc::CountingAlloc;
pub use attention::{attend_group, attend_rows, rows_per_tile};
pub use layout::{ABLOCK, Attn, KEY_BLOCK, PackedMatrix, Part, QuantActs, key_index};
pub use linear::{Input, LinearError, QLinear};
pub use plain::exp_fast;
pub use quantize::quantize;
pub use simd::{Simd, dot, dot_at, noise};
pub use softmax::{bin_indices, exp_sum, exp_weights, max_value};
