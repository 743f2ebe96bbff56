//! The AVX2 kernel of `attend_rows`: attention of several query rows of one sequence (a
//! prompt chunk) against one KV head, in one pass over the keys and values, a block of 16
//! positions at a time wherever the block table puts it. Each f16 key and value vector is
//! loaded and widened once for up to `QUERIES` queries instead of once per row, which is
//! what long prompts spend their attention time on. Every query's numbers are those of
//! `avx2::attend` for its row alone: the same scaled-query FMAs over `d` for each score,
//! the same softmax over its own positions, the same value sums over `p` in order (a query
//! adds nothing outside its own positions), so a row's output does not depend on the rows
//! it is tiled with.

use std::arch::x86_64::*;

use super::{prefetch_halves, score_keys, store_scores};
use crate::layout::{Attn, KEY_BLOCK, PartStat, block_runs};
use crate::x86::attention_tile::Tile;

/// Queries (rows x heads of the group) one tile carries.
pub(crate) const QUERIES: usize = 12;
/// Queries one pass over the keys or values carries: 6 queries x 2 vectors of
/// accumulators, two keys (or values) and a broadcast fill 15 of the 16 registers.
const HALF: usize = 6;

/// Attention of every `Attn` in `tile` (one row each, same keys, values, block table, head
/// size, scale and soft-cap; `g = q.len() / hd` heads each, `tile.len() * g <= QUERIES`)
/// into `out` (`tile.len() x g x hd`, in tile order).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C. Shapes and the block table are checked.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attend_rows(
    tile: &[Attn],
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [PartStat],
) {
    // Checks the shapes, and the blocks of min_start..max_end against the pools.
    let t = Tile::new(tile, QUERIES, 8, out.len());
    let (a0, hd, nq) = (&tile[0], t.hd, t.nq);
    let (min_start, max_end) = (t.min_start, t.max_end);
    let (p0, p1) = (min_start / 8 * 8, max_end.next_multiple_of(8));
    let lp = p1 - p0;
    scores.clear();
    scores.resize(QUERIES * lp, 0.0);
    let qs = t.scaled_queries(QUERIES);
    let kp = a0.keys.as_ptr() as *const u16;
    let vp = a0.values.as_ptr() as *const u16;
    // Scores, 6 queries at a time over a block's 16 positions (two key vectors per
    // broadcast query), or over 8 of them where p0..p1 covers only half of the first or
    // last block.
    // Each block's place is read from the table two blocks ahead (as in `avx2::attend`).
    let last = p1.div_ceil(KEY_BLOCK) - 1;
    let place = |b: usize| a0.block(b.min(last));
    for j0 in (0..nq).step_by(HALF) {
        let (mut next, mut after) = (place(p0 / KEY_BLOCK), place(p0 / KEY_BLOCK + 1));
        for (b, run) in block_runs(p0, p1) {
            // p0 and p1 are multiples of 8: the run is 8 or 16 positions, from position 0
            // or 8 of the block.
            let (lo, two) = (run.start % KEY_BLOCK, run.len() == 16);
            // Block b's place: the runs are of consecutive blocks from p0 / 16.
            let at = next;
            (next, after) = (after, place(b + 2));
            // SAFETY: `Tile::new` saw block b (it holds positions of min_start..max_end)
            // inside both pools, so the keys at `at + d * 16 + lo..+8` (and `+8..+16` when
            // `two`, then lo = 0) for every d < hd are in bounds; `qs` has hd * QUERIES
            // values; `scores` has QUERIES * lp and row j's stores end at
            // run.end - p0 <= lp. Prefetches never fault.
            unsafe {
                if j0 == 0 {
                    // The values of these positions, asked for now: the weighted sums
                    // read them after all the scores (as in `avx2::attend`).
                    let (v0, v1) = (run.start.max(min_start), run.end.min(max_end));
                    let (v0, v1) = (v0 % KEY_BLOCK, (v1 - 1) % KEY_BLOCK + 1);
                    prefetch_halves::<_MM_HINT_T0>(vp, at + v0 * hd, at + v1 * hd);
                }
                let (kb, q) = (kp.add(at + lo), qs.as_ptr().add(j0));
                let o = scores.as_mut_ptr().add(j0 * lp + run.start - p0);
                let count = (nq - j0).min(HALF);
                if two {
                    store_scores(score_keys::<HALF, 2>(kb, q, QUERIES, hd), count, o, lp);
                } else {
                    store_scores(score_keys::<HALF, 1>(kb, q, QUERIES, hd), count, o, lp);
                }
            }
        }
    }
    let inv: [f32; QUERIES] = t.softmax(scores, lp, p0, stats);
    // Query j takes positions start_j..end_j: all queries between max_start and min_end,
    // each its own outside.
    let range: [(usize, usize); QUERIES] = t.ranges();
    let common = t.common();
    // Values, 6 queries at a time over 16 columns (two value vectors per broadcast
    // weight), the last 8 columns alone when hd is not a multiple of 16.
    for j0 in (0..nq).step_by(HALF) {
        // This pass's queries' own positions (none past nq).
        let own: [(usize, usize); HALF] =
            std::array::from_fn(|j| if j0 + j < nq { range[j0 + j] } else { (0, 0) });
        let spans = [min_start, common.0, common.1, max_end];
        let mut c0 = 0;
        while c0 < hd {
            let two = c0 + 16 <= hd;
            // SAFETY: `Tile::new` saw the blocks of min_start..max_end inside `values`;
            // c0 + 8 (c0 + 16 when `two`) <= hd; row j0 + j < QUERIES of `scores` has lp
            // weights from p0.
            unsafe {
                let w = scores.as_ptr().add(j0 * lp).wrapping_sub(p0);
                // One or two vectors of columns, fixed in each loop.
                let acc = if two {
                    weigh_values::<2>(a0, w, lp, c0, own, spans)
                } else {
                    weigh_values::<1>(a0, w, lp, c0, own, spans).map(|[x]| [x, x])
                };
                for (j, acc) in acc.iter().enumerate().take(nq - j0) {
                    let o = out.as_mut_ptr().add((j0 + j) * hd + c0);
                    let inv = _mm256_set1_ps(inv[j0 + j]);
                    _mm256_storeu_ps(o, _mm256_mul_ps(acc[0], inv));
                    if two {
                        _mm256_storeu_ps(o.add(8), _mm256_mul_ps(acc[1], inv));
                    }
                }
            }
            c0 += if two { 16 } else { 8 };
        }
    }
}

/// The weighted sums of the values of columns `c0..c0 + 8 * N` for `HALF` queries, each
/// over its own positions `own[j]` (query `j`'s weight of position `p` at
/// `w[j * lp + p]`): over `spans[0]..spans[3]`, all queries taking the positions
/// `spans[1]..spans[2]` and each its own outside them; in order of position, as each row
/// alone sums them.
///
/// # Safety
/// The blocks of `spans[0]..spans[3]` are inside `a.values` (`Tile::new`),
/// `c0 + 8 * N <= a.hd`, and every weight of a query's own positions is in bounds.
#[inline(always)]
unsafe fn weigh_values<const N: usize>(
    a: &Attn,
    w: *const f32,
    lp: usize,
    c0: usize,
    own: [(usize, usize); HALF],
    spans: [usize; 4],
) -> [[__m256; N]; HALF] {
    // SAFETY: forwarded from the caller.
    unsafe {
        let acc = [[_mm256_setzero_ps(); N]; HALF];
        let acc = weigh_span::<N, false>(acc, a, w, lp, c0, own, spans[0], spans[1]);
        let acc = weigh_span::<N, true>(acc, a, w, lp, c0, own, spans[1], spans[2]);
        weigh_span::<N, false>(acc, a, w, lp, c0, own, spans[2], spans[3])
    }
}

/// `weigh_values` over positions `from..to`, a block at a time: every query's (`ALL`) or
/// each query's own. Taking and returning the accumulators by value keeps them in
/// registers.
///
/// # Safety
/// As `weigh_values`, for the blocks of `from..to`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn weigh_span<const N: usize, const ALL: bool>(
    mut acc: [[__m256; N]; HALF],
    a: &Attn,
    w: *const f32,
    lp: usize,
    c0: usize,
    own: [(usize, usize); HALF],
    from: usize,
    to: usize,
) -> [[__m256; N]; HALF] {
    // SAFETY: forwarded from the caller; a position's values are at `(p % 16) * hd` in
    // its block.
    unsafe {
        let (vp, hd) = (a.values.as_ptr() as *const u16, a.hd);
        let row = |p: usize| vp.add(a.block(p / KEY_BLOCK) + p % KEY_BLOCK * hd + c0);
        // The positions before the first block boundary, then whole blocks (16 rows `hd`
        // apart from where the table puts the block: one table read and a fixed count),
        // then the rest.
        let head = from.next_multiple_of(KEY_BLOCK).min(to);
        for p in from..head {
            acc = weigh_position::<N, ALL>(acc, row(p), w, lp, p, own);
        }
        let whole = to / KEY_BLOCK * KEY_BLOCK;
        let blocks = head / KEY_BLOCK..whole / KEY_BLOCK;
        if !blocks.is_empty() {
            let last = blocks.end - 1;
            // Each block's start read from the table two blocks ahead (as in
            // `avx2::attend`): the loads of its first rows wait on no table read.
            let base = |b: usize| vp.add(a.block(b.min(last)) + c0);
            let (mut next, mut after) = (base(blocks.start), base(blocks.start + 1));
            for b in blocks {
                let at = next;
                (next, after) = (after, base(b + 2));
                for k in 0..KEY_BLOCK {
                    let p = b * KEY_BLOCK + k;
                    acc = weigh_position::<N, ALL>(acc, at.add(k * hd), w, lp, p, own);
                }
            }
        }
        for p in whole.max(head)..to {
            acc = weigh_position::<N, ALL>(acc, row(p), w, lp, p, own);
        }
        acc
    }
}

/// Adds position `p`'s values (`N` vectors of 8 at `row`) times each query's weight
/// (`w[j * lp + p]`) to its accumulators: every query's (`ALL`) or where `p` is the
/// query's own (`own[j]`).
///
/// # Safety
/// The values at `row` and the weights read are in bounds.
#[inline(always)]
unsafe fn weigh_position<const N: usize, const ALL: bool>(
    mut acc: [[__m256; N]; HALF],
    row: *const u16,
    w: *const f32,
    lp: usize,
    p: usize,
    own: [(usize, usize); HALF],
) -> [[__m256; N]; HALF] {
    // SAFETY: forwarded from the caller.
    unsafe {
        let mut v = [_mm256_setzero_ps(); N];
        for (i, v) in v.iter_mut().enumerate() {
            *v = _mm256_cvtph_ps(_mm_loadu_si128(row.add(8 * i) as *const __m128i));
        }
        for (j, acc) in acc.iter_mut().enumerate() {
            if ALL || (own[j].0 <= p && p < own[j].1) {
                let wj = _mm256_broadcast_ss(&*w.wrapping_add(j * lp + p));
                for (acc, v) in acc.iter_mut().zip(v) {
                    *acc = _mm256_fmadd_ps(wj, v, *acc);
                }
            }
        }
        acc
    }
}
