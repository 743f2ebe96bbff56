//! The inputs of attention: transposed keys in blocks of `KEY_BLOCK` positions, and one
//! GQA group's queries over a slot's keys and values (`attention.rs` runs it).

use half::f16;

/// Positions per block of transposed keys. Within a block, the keys of one dimension
/// are adjacent (one vector load per dimension for 8 or 16 positions) and a block's
/// dimensions follow each other, so reading a block's keys, or writing one position
/// into it, touches one contiguous `2 * hd * KEY_BLOCK` bytes rather than `hd` rows a
/// whole context apart (a page each, and a TLB miss each, at long contexts).
pub const KEY_BLOCK: usize = 16;

/// Index of dimension `d` of position `p` in transposed keys of head size `hd`.
#[inline(always)]
pub fn key_index(hd: usize, d: usize, p: usize) -> usize {
    (p / KEY_BLOCK * hd + d) * KEY_BLOCK + p % KEY_BLOCK
}

/// The inputs of `attend_group`.
pub struct Attn<'a> {
    /// The group's query heads, `g x hd`.
    pub q: &'a [f32],
    /// Head dimension.
    pub hd: usize,
    /// Transposed keys in blocks of `KEY_BLOCK` positions, `[stride / KEY_BLOCK][hd]
    /// [KEY_BLOCK]`: dimension `d` of position `p` is at `key_index(hd, d, p)`.
    pub keys_t: &'a [f16],
    /// Positions `keys_t` holds (a multiple of `KEY_BLOCK`).
    pub stride: usize,
    /// Values of positions `0..len`, `len x hd`.
    pub values: &'a [f16],
    /// Score scale (1/sqrt(hd) unless the architecture says otherwise).
    pub scale: f32,
    /// First position attended (0; `len - window` for sliding-window layers).
    pub start: usize,
    /// Soft-capping of the scaled scores: `cap * tanh(s / cap)` (Gemma 2).
    pub softcap: Option<f32>,
}

impl Attn<'_> {
    /// Whether no option is in use (the case the AVX-512 kernel covers).
    pub(crate) fn plain(&self) -> bool {
        self.start == 0 && self.softcap.is_none()
    }
}
