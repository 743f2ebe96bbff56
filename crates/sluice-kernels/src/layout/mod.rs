//! The shapes the safe wrappers and the kernels (`x86/`, the portable loops) share: the
//! block and tile constants and the plain data types they pass each other, with the
//! accessors that read them. A leaf: it imports nothing from the crate.

mod acts;
mod attn;
mod matrix;
mod pages;
mod prefetch;

pub use acts::{ABLOCK, QuantActs};
pub(crate) use acts::{FOLDS, Out, TILE, Tiles, neg_sum};
pub(crate) use attn::block_runs;
pub use attn::{ATTN_PART, Attn, KEY_BLOCK, PartStat, key_index};
#[cfg(test)]
pub(crate) use matrix::force_avx2_vnni;
pub(crate) use matrix::{CHUNK, GROUP, PREFETCH_ROWS, folded_shift, high_bits};
pub(crate) use matrix::{
    PF_ANY, PF_L2, PF_OFF, SC_ANY, SC_FACTORED, SC_HALF, gfni, prefetch_case, scale_case,
    specialised,
};
pub use matrix::{PackedMatrix, Part, avx2_vnni, set_avx2_vnni, set_gfni, set_specialised};
#[cfg_attr(fuzzing, allow(unused_imports))]
pub(crate) use matrix::{VNNI_EVEX, VNNI_NONE, VNNI_VEX, vnni256};
pub use pages::{Huge, Zero};
pub(crate) use pages::{HugeBytes, Scratch};
pub use prefetch::{
    Prefetch, VALUES_AHEAD, set_attention_values_ahead, set_prefetch, set_prefetch_whole_bytes,
};
pub(crate) use prefetch::{attention_values_ahead, prefetch, prefetch_for};
