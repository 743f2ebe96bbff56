//! Activations quantised to int8 blocks (`acts.rs` quantises them, `acts_tiles.rs` lays
//! out the tiles): the rows, their tiles of 8, and the output slices of one quantisation
//! task.

/// Values per activation block.
pub const ABLOCK: usize = 32;

/// `n` rows of `cols` activations as int8 blocks.
#[derive(Debug, Default)]
pub struct QuantActs {
    /// Rows.
    pub n: usize,
    /// Values per row (a multiple of 32).
    pub cols: usize,
    /// Quantised values, row-major.
    pub q: Vec<i8>,
    /// Scale of each block of 32 (`n x cols/32`).
    pub d: Vec<f32>,
    /// `d * Σq` over each block of 32.
    pub s32: Vec<f32>,
    /// `d * Σq` over each half-block of 16 (`n x cols/16`).
    pub s16: Vec<f32>,
    /// Lane sums of each block of 32 (`n x cols/32`, see `acts::lane_sums`).
    pub l32: Vec<i32>,
    /// Lane sums of each half-block of 16 (`n x cols/16`).
    pub l16: Vec<i32>,
    /// The whole tiles of 8 rows, laid out for the AVX-512 kernel (empty below it).
    pub(crate) tiles: Tiles,
}

impl QuantActs {
    /// Block sums for weight blocks of `bk` (16 or 32) columns.
    #[inline(always)]
    pub fn sums(&self, bk: usize) -> &[f32] {
        if bk == 16 { &self.s16 } else { &self.s32 }
    }
}

/// `-Σq` of a block from its lane sums (`acts::lane_sums`): the two negated 16-bit halves added.
#[inline(always)]
pub(crate) fn neg_sum(lanes: i32) -> i32 {
    (lanes as i16 as i32) + (lanes >> 16)
}

/// Rows per tile.
pub(crate) const TILE: usize = 8;

/// The (block size, shift) pairs of the offsets `-2^s·d` that the AVX-512 kernel takes
/// inside the integer sum: Q4_0 (32, 3), Q5_0 (32, 4), Q8_0 (32, 7), Q6_K (16, 5).
pub(crate) const FOLDS: [(usize, u32); 4] = [(32, 3), (32, 4), (32, 7), (16, 5)];

/// The whole tiles of a `QuantActs` (rows past the last whole tile are only row-major), in
/// the layout `acts_tiles.rs` describes.
#[derive(Debug, Default)]
pub struct Tiles {
    /// Whole tiles.
    pub(crate) n: usize,
    /// Quants, `[tile][block of 32][row][32]`.
    pub(crate) q: Vec<i8>,
    /// Scale of each block of 32, `[tile][block][row]`.
    pub(crate) d: Vec<f32>,
    /// `d · Σq` over each block of 32, `[tile][block][row]`.
    pub(crate) s32: Vec<f32>,
    /// `d · Σq` over each block of 16, `[tile][block of 16][row]`.
    pub(crate) s16: Vec<f32>,
    /// `-2^s · Σq` over each block of `bk` for each `FOLDS` entry, `[tile][block][row]`.
    pub(crate) z: [Vec<i32>; FOLDS.len()],
}

impl Tiles {
    /// Sums by blocks of `bk` (16 or 32).
    #[inline(always)]
    pub(crate) fn sums(&self, bk: usize) -> &[f32] {
        if bk == 16 { &self.s16 } else { &self.s32 }
    }
}

/// The output slices of some rows.
pub(crate) struct Out<'a> {
    pub q: &'a mut [i8],
    pub d: &'a mut [f32],
    pub s32: &'a mut [f32],
    pub s16: &'a mut [f32],
}

impl Out<'_> {
    /// The quant bytes of block `b`.
    #[inline(always)]
    pub(crate) fn block(&mut self, b: usize) -> &mut [i8] {
        &mut self.q[b * ABLOCK..][..ABLOCK]
    }

    /// Block `b`'s scale and sums, from the sums of its halves' quants (`plain::quantise_block`).
    #[inline(always)]
    pub(crate) fn put(&mut self, b: usize, (s0, s1, d): (i32, i32, f32)) {
        self.d[b] = d;
        self.s16[2 * b] = d * s0 as f32;
        self.s16[2 * b + 1] = d * s1 as f32;
        self.s32[b] = d * (s0 + s1) as f32;
    }
}
