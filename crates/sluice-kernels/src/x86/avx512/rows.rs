//! The AVX-512 kernel of `attend_rows`: `avx2::rows` with 16-lane vectors and twice the
//! queries per tile, which the 32 vector registers hold. A score pass keeps 12 queries'
//! 16-position accumulators and one widened key vector (13 registers); a value pass keeps
//! 12 queries' 32-column accumulators and two widened value vectors (27). Every query's
//! numbers are those of its row alone (`attention::attend_group`): the same scaled-query
//! FMAs over `d` for each score, the same softmax over its own positions, the same value
//! sums over `p` in order, so a row's output does not depend on the rows it is tiled with.

use std::arch::x86_64::*;

use crate::layout::{Attn, KEY_BLOCK, PartStat, block_runs};
use crate::x86::attention_tile::Tile;
use crate::x86::avx2::prefetch_halves;

/// Queries (rows x heads of the group) one tile carries.
pub(crate) const QUERIES: usize = 24;
/// Queries one pass over the keys or the values carries.
const PASS: usize = 12;

/// Attention of every `Attn` in `tile` (one row each, same keys, values, block table, head
/// size, scale and soft-cap; `g = q.len() / hd` heads each, `tile.len() * g <= QUERIES`,
/// `hd` a multiple of 16) into `out` (`tile.len() x g x hd`, in tile order).
///
/// # Safety
/// The CPU must have AVX-512F, FMA and F16C. Shapes and the block table are checked.
#[target_feature(enable = "avx512f,fma,f16c")]
pub(crate) unsafe fn attend_rows(
    tile: &[Attn],
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [PartStat],
) {
    // Checks the shapes, and the blocks of min_start..max_end against the pools.
    let t = Tile::new(tile, QUERIES, KEY_BLOCK, out.len());
    let (a0, hd, nq) = (&tile[0], t.hd, t.nq);
    let (min_start, max_end) = (t.min_start, t.max_end);
    // Whole key blocks: one 16-position vector per dimension.
    let (p0, p1) = (
        min_start / KEY_BLOCK * KEY_BLOCK,
        max_end.next_multiple_of(KEY_BLOCK),
    );
    let lp = p1 - p0;
    scores.clear();
    scores.resize(QUERIES * lp, 0.0);
    let qs = t.scaled_queries(QUERIES);
    let kp = a0.keys.as_ptr() as *const u16;
    let vp = a0.values.as_ptr() as *const u16;
    for j0 in (0..nq).step_by(PASS) {
        for b in p0 / KEY_BLOCK..p1 / KEY_BLOCK {
            let p = b * KEY_BLOCK;
            let at = a0.block(b);
            // SAFETY: `Tile::new` saw block b (it holds positions of min_start..max_end)
            // inside both pools, so its 16 keys of every dimension d < hd are in bounds;
            // `qs` has hd * QUERIES values; `scores` has QUERIES * lp and row j's stores
            // end at p + 16 - p0 <= lp. Prefetches never fault.
            unsafe {
                if j0 == 0 {
                    // The values of these positions, asked for now: the weighted sums
                    // read them after all the scores.
                    let (v0, v1) = (p.max(min_start) - p, (p + KEY_BLOCK).min(max_end) - p);
                    prefetch_halves::<_MM_HINT_T0>(vp, at + v0 * hd, at + v1 * hd);
                }
                let mut acc = [_mm512_setzero_ps(); PASS];
                let kb = kp.add(at);
                for d in 0..hd {
                    let k = _mm512_cvtph_ps(_mm256_loadu_si256(
                        kb.add(d * KEY_BLOCK) as *const __m256i
                    ));
                    let qd = qs.as_ptr().add(d * QUERIES + j0);
                    for (j, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(_mm512_set1_ps(*qd.add(j)), k, *acc);
                    }
                }
                for (j, acc) in acc.iter().enumerate().take(nq - j0) {
                    _mm512_storeu_ps(scores.as_mut_ptr().add((j0 + j) * lp + p - p0), *acc);
                }
            }
        }
    }
    let inv: [f32; QUERIES] = t.softmax(scores, lp, p0, stats);
    // Query j takes positions start_j..end_j: all queries between max_start and min_end,
    // each its own outside.
    let range: [(usize, usize); QUERIES] = t.ranges();
    let common = t.common();
    // Values, 12 queries at a time over 32 columns (two value vectors per broadcast
    // weight), the last 16 columns alone when hd is not a multiple of 32.
    for j0 in (0..nq).step_by(PASS) {
        let mut c0 = 0;
        while c0 < hd {
            let two = c0 + 32 <= hd;
            // SAFETY: the block of every position min_start <= p < max_end is inside
            // `values` (`Tile::new`) and holds the position's hd halves at
            // `(p % 16) * hd`, and c0 + 16 (c0 + 32 when `two`) <= hd; weights are read
            // inside `scores`.
            unsafe {
                let w = scores.as_ptr().add(j0 * lp).wrapping_sub(p0);
                let mut acc = [[_mm512_setzero_ps(); 2]; PASS];
                // Positions before and after the common range: each query its own.
                let own = |p: usize| -> [__mmask16; PASS] {
                    std::array::from_fn(|j| {
                        let mine = j0 + j < nq && range[j0 + j].0 <= p && p < range[j0 + j].1;
                        if mine { 0xFFFF } else { 0 }
                    })
                };
                // A block at a time, each position's values row found through the table;
                // in order of position, as each row alone sums them.
                for (b, run) in block_runs(min_start, common.0) {
                    let vb = vp.add(a0.block(b) + c0);
                    for p in run {
                        let row = vb.add(p % KEY_BLOCK * hd);
                        acc = weigh(acc, w, lp, row, p, two, own(p));
                    }
                }
                for (b, run) in block_runs(common.0, common.1) {
                    let vb = vp.add(a0.block(b) + c0);
                    for p in run {
                        let row = vb.add(p % KEY_BLOCK * hd);
                        acc = weigh(acc, w, lp, row, p, two, [0xFFFF; PASS]);
                    }
                }
                for (b, run) in block_runs(common.1, max_end) {
                    let vb = vp.add(a0.block(b) + c0);
                    for p in run {
                        let row = vb.add(p % KEY_BLOCK * hd);
                        acc = weigh(acc, w, lp, row, p, two, own(p));
                    }
                }
                for (j, acc) in acc.iter().enumerate().take(nq - j0) {
                    let o = out.as_mut_ptr().add((j0 + j) * hd + c0);
                    let inv = _mm512_set1_ps(inv[j0 + j]);
                    _mm512_storeu_ps(o, _mm512_mul_ps(acc[0], inv));
                    if two {
                        _mm512_storeu_ps(o.add(16), _mm512_mul_ps(acc[1], inv));
                    }
                }
            }
            c0 += if two { 32 } else { 16 };
        }
    }
}

/// Adds position `p`'s values (16 columns at `row`, 32 with `two`) times each query's
/// weight (`w[j * lp + p]`) to its accumulators, where `mask` lets it. Taking and
/// returning the accumulators by value keeps them in registers.
///
/// # Safety
/// As `attend_rows`: the values at `row` and every weight read are in bounds.
#[inline(always)]
unsafe fn weigh(
    mut acc: [[__m512; 2]; PASS],
    w: *const f32,
    lp: usize,
    row: *const u16,
    p: usize,
    two: bool,
    mask: [__mmask16; PASS],
) -> [[__m512; 2]; PASS] {
    // SAFETY: forwarded from the caller.
    unsafe {
        let v0 = _mm512_cvtph_ps(_mm256_loadu_si256(row as *const __m256i));
        let v1 = if two {
            _mm512_cvtph_ps(_mm256_loadu_si256(row.add(16) as *const __m256i))
        } else {
            v0
        };
        let wp = w.wrapping_add(p);
        for (j, acc) in acc.iter_mut().enumerate() {
            let wj = _mm512_set1_ps(*wp.add(j * lp));
            acc[0] = _mm512_mask3_fmadd_ps(wj, v0, acc[0], mask[j]);
            acc[1] = _mm512_mask3_fmadd_ps(wj, v1, acc[1], mask[j]);
        }
        acc
    }
}
