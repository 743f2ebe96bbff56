//! Activation rows in tiles of 8, the layout the AVX-512 many-row matmul reads
//! (`x86::avx512::matmul::tile`).
//!
//! A tile holds 8 consecutive rows. Its quants are stored block by block: for each block
//! of 32 columns, the 8 rows' 32 bytes one after the other (256 bytes). Row `k`'s 4 bytes
//! of chunk `c` in block `b` are then at a fixed distance `256·b + 32·k + 4·c` from the
//! tile's start, so the kernel reaches all 8 rows from one pointer with constant
//! displacements. Read row-major, each row needed its own pointer, and LLVM addressed
//! them from one shared index: `vpdpbusd` with an indexed memory operand, which Intel
//! cores split into two micro-ops (this VM has no hardware counters to show it; the
//! measured gain: a C model of the kernel 184 -> 214 GMAC/s from the layout, the Rust
//! kernel Q5_0 384 -> 435-463 from plain addresses, `x86::avx512::matmul::opaque`). The
//! scales and block sums are stored the same way (`[tile][block][row]`).
//!
//! For weights whose offset is `-2^s·d` (Q4_0, Q5_0, Q8_0 packed as `q + 128`, Q6_K:
//! `FOLDS`), the kernel takes the offset inside the integer sum by starting each block's
//! sum at `-2^s·Σq` of the row's block, which `z` holds ready for each such `(bk, s)`: a
//! broadcast load, where the float offset term was one multiply-add per row and block
//! (another 214 -> 235 GMAC/s in the C model).

use crate::layout::{ABLOCK, FOLDS, TILE, Tiles, neg_sum};

impl Tiles {
    /// Sizes the buffers for `tiles` tiles of rows of `cols` values.
    pub(crate) fn resize(&mut self, tiles: usize, cols: usize) {
        let nb = cols / ABLOCK;
        self.n = tiles;
        self.q.resize(tiles * TILE * cols, 0);
        self.d.resize(tiles * TILE * nb, 0.0);
        self.s32.resize(tiles * TILE * nb, 0.0);
        self.s16.resize(tiles * TILE * nb * 2, 0.0);
        for (z, (bk, _)) in self.z.iter_mut().zip(FOLDS) {
            z.resize(tiles * TILE * cols / bk, 0);
        }
    }
}

/// The tile slices one quantisation task fills.
pub(crate) struct TilesOut<'a> {
    pub q: &'a mut [i8],
    pub d: &'a mut [f32],
    pub s32: &'a mut [f32],
    pub s16: &'a mut [f32],
    pub z: [&'a mut [i32]; FOLDS.len()],
}

/// Lays out the whole tiles of some rows (row-major `q`, `d`, `s32`, `s16`, and the lane
/// sums `l32`, `l16` of `acts::lane_sums`, of rows of `cols` values) into `t`.
pub(crate) fn build(t: TilesOut, rows: Rows, cols: usize) {
    let nb = cols / ABLOCK;
    let tiles = rows.q.len() / cols / TILE;
    let TilesOut {
        q: tq,
        d: td,
        s32: ts32,
        s16: ts16,
        mut z,
    } = t;
    // Written in order (the rows of a tile are read at a stride): scattered writes were
    // 2.5% of a SmolLM2 prefill.
    for tt in 0..tiles {
        let r0 = tt * TILE;
        let rq = &rows.q[r0 * cols..][..TILE * cols];
        let out = &mut tq[r0 * cols..][..TILE * cols];
        for (b, out) in out.chunks_exact_mut(TILE * ABLOCK).enumerate() {
            for (k, o) in out.chunks_exact_mut(ABLOCK).enumerate() {
                o.copy_from_slice(&rq[k * cols + b * ABLOCK..][..ABLOCK]);
            }
        }
        lay(rows.d, td, r0, nb, |v| v);
        lay(rows.s32, ts32, r0, nb, |v| v);
        lay(rows.s16, ts16, r0, 2 * nb, |v| v);
        for (zs, (bk, s)) in z.iter_mut().zip(FOLDS) {
            let lanes = if bk == 32 { rows.l32 } else { rows.l16 };
            lay(lanes, zs, r0, cols / bk, |l| neg_sum(l) << s);
        }
    }
}

/// One value per block of the tile starting at row `r0`, from `from` (`[row][block]`,
/// `blocks` a row) to `to` (`[tile][block][row]`) through `f`, written in order.
fn lay<T: Copy, U>(from: &[T], to: &mut [U], r0: usize, blocks: usize, f: impl Fn(T) -> U) {
    let from = &from[r0 * blocks..][..TILE * blocks];
    for (b, o) in to[r0 * blocks..][..TILE * blocks]
        .chunks_exact_mut(TILE)
        .enumerate()
    {
        for (k, o) in o.iter_mut().enumerate() {
            *o = f(from[k * blocks + b]);
        }
    }
}

/// The row-major quantisation of some rows, as `QuantActs` holds it.
pub(crate) struct Rows<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub s32: &'a [f32],
    pub s16: &'a [f32],
    pub l32: &'a [i32],
    pub l16: &'a [i32],
}
