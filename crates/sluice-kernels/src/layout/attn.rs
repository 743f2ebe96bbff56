//! The inputs of attention: one GQA group's queries over a sequence's keys and values,
//! which live in a pool of blocks of `KEY_BLOCK` positions found through a block table
//! (`attention.rs` runs it).

use std::ops::Range;

use half::f16;

/// Positions per block, of keys and of values. Within a key block, the keys of one
/// dimension are adjacent (one vector load per dimension for 8 or 16 positions) and a
/// block's dimensions follow each other, so reading a block's keys, or writing one
/// position into it, touches one contiguous `2 * hd * KEY_BLOCK` bytes rather than `hd`
/// rows a whole context apart (a page each, and a TLB miss each, at long contexts).
pub const KEY_BLOCK: usize = 16;

/// Index of dimension `d` of position `p` in contiguous transposed keys of head size `hd`
/// (`[blocks][hd][KEY_BLOCK]`, block `b` at `b * hd * KEY_BLOCK`: the identity table).
#[inline(always)]
pub fn key_index(hd: usize, d: usize, p: usize) -> usize {
    (p / KEY_BLOCK * hd + d) * KEY_BLOCK + p % KEY_BLOCK
}

/// Positions of one part of a long row. A row's positions are cut at the multiples of
/// `ATTN_PART` (absolute positions, so consecutive rows of a tile share the cuts): each part
/// takes its own softmax and weighted sum, and the parts are merged by their maxima and
/// sums (`attention::merge_parts`). A row within one part is computed as if there were
/// no cut. The cuts depend on the row's positions alone, never on its batch or on how
/// the parts are shared out, so a row gets the same bits everywhere; the parts of a
/// long decode row can run on different threads.
pub const ATTN_PART: usize = 1024;

/// The softmax of one part of a row, for one query head: its largest scaled score and the
/// sum of `exp(score - max)` over the part's positions.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PartStat {
    pub max: f32,
    pub sum: f32,
}

/// The inputs of `attend_group`.
///
/// A sequence's positions live in blocks of `KEY_BLOCK`: positions `16b..16b + 16` are in
/// pool block `table[b]`, at `table[b] * block_stride` in both `keys` and `values`. With
/// `table = [0, 1, 2, ...]` and `block_stride = hd * 16` the layout is contiguous: keys
/// `[blocks][hd][16]` and values `[position][hd]`.
#[derive(Clone, Copy)]
pub struct Attn<'a> {
    /// The group's query heads, `g x hd`.
    pub q: &'a [f32],
    /// Head dimension.
    pub hd: usize,
    /// Pool of transposed key blocks for this KV head: the block holding positions
    /// 16b..16b+16 starts at `keys[table[b] as usize * block_stride]` and is `[hd][KEY_BLOCK]`
    /// (dimension d of position p at `table[p/16]*block_stride + d*KEY_BLOCK + p%16`).
    pub keys: &'a [f16],
    /// Pool of value blocks for this KV head: position p's `hd` values start at
    /// `values[table[p/16] as usize * block_stride + (p % 16) * hd]`.
    pub values: &'a [f16],
    /// Pool block of each 16 positions of the sequence (at least `len.div_ceil(16)` entries).
    /// Entries of blocks wholly before `start` are never read (a window may free them).
    pub table: &'a [u32],
    /// Elements from one pool block to the next (at least `hd * KEY_BLOCK`).
    pub block_stride: usize,
    /// Live positions: `0..len` are attended (`start..len` with a window).
    pub len: usize,
    /// Score scale (1/sqrt(hd) unless the architecture says otherwise).
    pub scale: f32,
    /// First position attended (0; `len - window` for sliding-window layers).
    pub start: usize,
    /// Soft-capping of the scaled scores: `cap * tanh(s / cap)` (Gemma 2).
    pub softcap: Option<f32>,
}

impl<'a> Attn<'a> {
    /// Whether no soft-cap is in use (the case the AVX-512 kernel covers).
    pub(crate) fn plain(&self) -> bool {
        self.softcap.is_none()
    }

    /// The parts (`ATTN_PART`) that positions `start..len` touch, by index.
    pub fn parts(&self) -> Range<usize> {
        if self.start >= self.len {
            return 0..0;
        }
        self.start / ATTN_PART..self.len.div_ceil(ATTN_PART)
    }

    /// The row restricted to part `c`'s positions, or `None` if it has none there.
    pub fn part(&self, c: usize) -> Option<Attn<'a>> {
        self.run(c..c + 1)
    }

    /// The row restricted to the positions of parts `parts` (consecutive), or `None` if it
    /// has none there: its own parts are then `parts` (where the row has them).
    pub fn run(&self, parts: Range<usize>) -> Option<Attn<'a>> {
        let start = self.start.max(parts.start * ATTN_PART);
        let len = self.len.min(parts.end * ATTN_PART);
        (start < len).then_some(Attn {
            start,
            len,
            ..*self
        })
    }

    /// Where the block holding positions `16b..16b + 16` starts, in `keys` and in
    /// `values`.
    #[inline(always)]
    pub(crate) fn block(&self, b: usize) -> usize {
        self.table[b] as usize * self.block_stride
    }

    /// Checks the blocks that hold positions `from..to` (`to <= len`): the table has an
    /// entry for every position of `0..len`, `block_stride` is at least a block (pool
    /// blocks do not run into each other), and each whole block of `from..to`,
    /// `hd * KEY_BLOCK` keys and as many values, is inside both pools. The kernels call it
    /// once, before any unchecked read: then a read anywhere inside one of these blocks is
    /// in bounds, whatever the position (and positions past `len` in the last one).
    pub(crate) fn check_blocks(&self, from: usize, to: usize) {
        let size = self.hd * KEY_BLOCK;
        let pools = self.keys.len().min(self.values.len());
        assert!(
            to <= self.len
                && self.block_stride >= size
                && self.table.len() >= self.len.div_ceil(KEY_BLOCK),
            "attention block table"
        );
        // The furthest block is inside both pools, hence every one (a vectorised maximum:
        // this runs on every call).
        let furthest = self.table[blocks(from, to)]
            .iter()
            .fold(0, |m, &t| m.max(t));
        let end = (furthest as usize)
            .checked_mul(self.block_stride)
            .and_then(|at| at.checked_add(size));
        assert!(end.is_some_and(|end| end <= pools), "attention block table");
    }
}

/// The blocks that hold positions `from..to`.
#[inline(always)]
fn blocks(from: usize, to: usize) -> Range<usize> {
    if from >= to {
        return 0..0;
    }
    from / KEY_BLOCK..to.div_ceil(KEY_BLOCK)
}

/// Positions `from..to` cut at block boundaries, in order: each block `b` they touch with
/// the positions of `from..to` inside it.
#[inline(always)]
pub(crate) fn block_runs(from: usize, to: usize) -> impl Iterator<Item = (usize, Range<usize>)> {
    blocks(from, to).map(move |b| {
        let first = b * KEY_BLOCK;
        (b, from.max(first)..to.min(first + KEY_BLOCK))
    })
}
