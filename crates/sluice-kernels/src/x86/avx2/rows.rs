//! The AVX2 kernel of `attend_rows`: attention of several query rows of one slot (a
//! prompt chunk) against one KV head, in one pass over the keys and values. Each f16 key
//! and value vector is loaded and widened once for up to `QUERIES` queries instead of
//! once per row, which is what long prompts spend their attention time on. Every query's
//! numbers are those of `avx2::attend` for its row alone: the same scaled-query FMAs over
//! `d` for each score, the same softmax over its own positions, the same value sums over
//! `p` in order (a query adds nothing outside its own positions), so a row's output does
//! not depend on the rows it is tiled with.

use std::arch::x86_64::*;

use super::prefetch_values;
use crate::layout::{Attn, KEY_BLOCK, key_index};
use crate::x86::attention_tile::Tile;

/// Queries (rows x heads of the group) one tile carries.
pub(crate) const QUERIES: usize = 12;
/// Queries one pass over the keys or values carries: 6 queries x 2 vectors of
/// accumulators, two keys (or values) and a broadcast fill 15 of the 16 registers.
const HALF: usize = 6;

/// Attention of every `Attn` in `tile` (one row each, same keys, values, head size, scale
/// and soft-cap; `g = q.len() / hd` heads each, `tile.len() * g <= QUERIES`) into `out`
/// (`tile.len() x g x hd`, in tile order).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C. Shapes are checked.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attend_rows(tile: &[Attn], scores: &mut Vec<f32>, out: &mut [f32]) {
    let t = Tile::new(tile, QUERIES, 8, out.len());
    let (a0, hd, nq) = (&tile[0], t.hd, t.nq);
    let (min_start, max_end) = (t.min_start, t.max_end);
    let values = t.values();
    let (p0, p1) = (min_start / 8 * 8, max_end.next_multiple_of(8));
    let lp = p1 - p0;
    scores.clear();
    scores.resize(QUERIES * lp, 0.0);
    let qs = t.scaled_queries(QUERIES);
    let kp = a0.keys_t.as_ptr() as *const u16;
    let vp = values.as_ptr() as *const u16;
    // Scores, 6 queries at a time over 16 positions (two key vectors per broadcast
    // query), the last 8 positions alone when the range is not a multiple of 16.
    for j0 in (0..nq).step_by(HALF) {
        let mut p = p0;
        while p < p1 {
            let two = p + 16 <= p1;
            // SAFETY: p + 8 (p + 16 when `two`) <= p1 <= stride, so the key blocks of
            // positions p and, when `two`, p + 8 are inside `keys_t`; `qs` has
            // hd * QUERIES values; `scores` has QUERIES * lp and row j's stores end at
            // p - p0 + 16 <= lp.
            unsafe {
                if j0 == 0 {
                    // The values of these positions, asked for now: the weighted sums
                    // read them after all the scores (as in `avx2::attend`).
                    let step = if two { 16 } else { 8 };
                    prefetch_values(vp, p.max(min_start) * hd, (p + step).min(max_end) * hd);
                }
                let mut acc = [[_mm256_setzero_ps(); 2]; HALF];
                // p is a multiple of 8: positions p.. and p + 8.. each lie in one block.
                let kb0 = kp.add(key_index(hd, 0, p));
                let kb1 = kp.wrapping_add(key_index(hd, 0, p + 8));
                for d in 0..hd {
                    let k0 =
                        _mm256_cvtph_ps(_mm_loadu_si128(kb0.add(d * KEY_BLOCK) as *const __m128i));
                    let k1 = if two {
                        _mm256_cvtph_ps(_mm_loadu_si128(kb1.add(d * KEY_BLOCK) as *const __m128i))
                    } else {
                        k0
                    };
                    let qd = qs.as_ptr().add(d * QUERIES + j0);
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let w = _mm256_broadcast_ss(&*qd.add(j));
                        acc[0] = _mm256_fmadd_ps(w, k0, acc[0]);
                        acc[1] = _mm256_fmadd_ps(w, k1, acc[1]);
                    }
                }
                for (j, acc) in acc.iter().enumerate().take(nq - j0) {
                    let o = scores.as_mut_ptr().add((j0 + j) * lp + p - p0);
                    _mm256_storeu_ps(o, acc[0]);
                    if two {
                        _mm256_storeu_ps(o.add(8), acc[1]);
                    }
                }
            }
            p += if two { 16 } else { 8 };
        }
    }
    let inv: [f32; QUERIES] = t.softmax(scores, lp, p0);
    // Query j takes positions start_j..end_j: all queries between max_start and min_end,
    // each its own outside.
    let range: [(usize, usize); QUERIES] = t.ranges();
    let common = t.common();
    // Values, 6 queries at a time over 16 columns (two value vectors per broadcast
    // weight), the last 8 columns alone when hd is not a multiple of 16.
    for j0 in (0..nq).step_by(HALF) {
        let mut c0 = 0;
        while c0 < hd {
            let two = c0 + 16 <= hd;
            // SAFETY: every value row p < max_end has hd halves inside `values`, and
            // c0 + 8 (c0 + 16 when `two`) <= hd; weights are read inside `scores`.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); 2]; HALF];
                let load = |p: usize| {
                    let at = vp.add(p * hd + c0);
                    let v0 = _mm256_cvtph_ps(_mm_loadu_si128(at as *const __m128i));
                    let v1 = if two {
                        _mm256_cvtph_ps(_mm_loadu_si128(at.add(8) as *const __m128i))
                    } else {
                        v0
                    };
                    (v0, v1)
                };
                let weight = |j: usize, p: usize| {
                    _mm256_broadcast_ss(&*scores.as_ptr().add((j0 + j) * lp + p - p0))
                };
                let add = |acc: &mut [__m256; 2], w: __m256, (v0, v1): (__m256, __m256)| {
                    acc[0] = _mm256_fmadd_ps(w, v0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(w, v1, acc[1]);
                };
                let mine =
                    |j: usize, p: usize| j0 + j < nq && range[j0 + j].0 <= p && p < range[j0 + j].1;
                for p in min_start..common.0 {
                    let v = load(p);
                    for (j, acc) in acc.iter_mut().enumerate() {
                        if mine(j, p) {
                            add(acc, weight(j, p), v);
                        }
                    }
                }
                for p in common.0..common.1 {
                    let v = load(p);
                    for (j, acc) in acc.iter_mut().enumerate() {
                        add(acc, weight(j, p), v);
                    }
                }
                for p in common.1..max_end {
                    let v = load(p);
                    for (j, acc) in acc.iter_mut().enumerate() {
                        if mine(j, p) {
                            add(acc, weight(j, p), v);
                        }
                    }
                }
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
