//! sluice's CPU kernels: every `unsafe` block of the project and all SIMD, behind a safe,
//! slice-based API.
//!
//! - [`Simd`]: the instruction-set level, detected once at start-up (`SLUICE_KERNEL` may
//!   force a lower one). Each kernel dispatches on it.
//! - Files: `layout/` holds the block and tile constants and the data types that the safe
//!   wrappers and the kernels pass each other, and imports nothing from the crate.
//!   `plain/` holds the plain-loop definitions (and [`exp_fast`]): the portable path, which
//!   the SIMD kernels also compile with their features. `x86/` holds every function
//!   compiled with CPU features, per instruction set (`x86/avx2/`: `mod.rs`, `matmul.rs`,
//!   `acts.rs`, `rows.rs`; `x86/avx512/`: `mod.rs`, `matmul.rs`, `rows.rs`), and imports
//!   only `layout` and `plain`. The other files are the safe wrappers, which dispatch on
//!   [`Simd`] into `x86/` or `plain/`.
//! - [`QLinear`]: a weight matrix kept in its GGUF quantisation; `matmul` multiplies it
//!   by f32 activations (int8-quantised once per [`Input`] for the integer kernels).
//! - [`attend_group`]: attention of one GQA group over f16 keys and values;
//!   [`attend_rows`]: of several rows of one slot in one pass.
//! - [`silu_mul`] / [`gelu_mul`], [`exp_fast`], [`dot`]; the vocabulary passes of
//!   sampling: [`max_value`], [`exp_weights`], [`bin_indices`], [`exp_sum`].

mod activation;
mod acts;
mod acts_tiles;
mod ahead;
mod alloc;
mod attention;
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
pub mod stages;
mod tasks;
pub mod threads;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use activation::{gelu_mul, silu_mul};
pub use ahead::{prefetch, set_fetch_ahead};
pub use alloc::{CountingAlloc, return_freed_memory};
pub use attention::{attend_group, attend_parts, attend_rows, merge_parts, rows_per_tile};
pub use layout::{
    ABLOCK, ATTN_PART, Attn, Huge, KEY_BLOCK, PackedMatrix, Part, PartStat, Prefetch, QuantActs,
    VALUES_AHEAD, Zero, avx2_vnni, key_index, set_attention_values_ahead, set_avx2_vnni, set_gfni,
    set_prefetch, set_prefetch_whole_bytes, set_specialised,
};
pub use linear::{BATCH_ROWS, Input, LinearError, QLinear};
pub use plain::exp_fast;
pub use quantize::quantize;
pub use simd::{Simd, dot, dot_at, noise};
pub use softmax::{bin_indices, exp_sum, exp_weights, max_value};
pub use tasks::set_halving;
