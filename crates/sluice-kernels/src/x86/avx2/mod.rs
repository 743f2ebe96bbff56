//! The AVX2 kernels (AVX2 with FMA and F16C): decode attention, and the plain-loop
//! definitions of the other kernels compiled with these features enabled. The integer
//! matmul of `PackedMatrix` is in `matmul.rs`, activation quantisation in `acts.rs`,
//! prompt attention in `rows.rs`, the matmul's scale lanes in `scales.rs`, its
//! `vpdpbusd` (AVX-VNNI, or AVX-512 VNNI at 256 bits) and the dispatch to the form in
//! force in `vnni.rs`.
//! `unsafe` only because of the CPU features, which `Simd::current` checks once.

pub(crate) mod acts;
pub(crate) mod matmul;
pub(crate) mod rows;
mod scales;
pub(crate) mod vnni;

use std::arch::x86_64::*;

use crate::layout::{Attn, KEY_BLOCK, PartStat, block_runs};

/// Prefetches the f16 values (or keys) `vp[lo..hi]` a cache line (32 halves) at a time,
/// into the cache `HINT` names (`_MM_HINT_T0`: L1, the next block's; `_MM_HINT_T1`: L2,
/// the values `layout::VALUES_AHEAD` blocks ahead).
///
/// # Safety
/// None beyond the caller's SSE (every x86_64 CPU has it): a prefetch never faults, so
/// the addresses need not be in bounds.
#[inline(always)]
pub(crate) unsafe fn prefetch_halves<const HINT: i32>(vp: *const u16, lo: usize, hi: usize) {
    for at in (lo..hi).step_by(32) {
        // SAFETY: a prefetch does not fault.
        unsafe { _mm_prefetch::<HINT>(vp.wrapping_add(at) as *const i8) };
    }
}

/// Asks for the `len` bytes `ahead` bytes past `q` (a block of weights about to be read
/// `ahead` bytes from now), a cache line at a time, into the cache `hint` names
/// (`layout::Prefetch as u8`; `Off`: nothing).
/// A prefetch never faults, so the addresses may run past the matrix.
#[inline(always)]
pub(crate) unsafe fn prefetch_ahead(q: *const u8, len: usize, ahead: usize, hint: u8) {
    for l in (0..len).step_by(64) {
        let at = q.wrapping_add(ahead + l) as *const i8;
        // SAFETY: the caller has SSE (every AVX2 CPU does); a prefetch does not fault.
        unsafe {
            match hint {
                1 => _mm_prefetch::<_MM_HINT_T0>(at),
                2 => _mm_prefetch::<_MM_HINT_T1>(at),
                3 => _mm_prefetch::<_MM_HINT_NTA>(at),
                _ => {}
            }
        }
    }
}

/// Attention: 16 positions' scores at a time for up to 4 heads (one f16 key row load feeds
/// every head of the group), soft-cap and softmax over the window, then the values in
/// 16-wide column strips. A block at a time: one table lookup per 16 positions. The sums
/// run in the order of `plain::attend_body`. The next key block and each block's values
/// are asked for while the scores are taken, and the weighted sums ask for the values
/// `layout::VALUES_AHEAD` blocks ahead into L2.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attend(
    a: &Attn,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [PartStat],
) {
    const H: usize = 4;
    let hd = a.hd;
    let g = a.q.len() / hd;
    let (start, end) = (a.start, a.len);
    if !hd.is_multiple_of(8) {
        return crate::plain::attend_body(a, scores, out, stats, f32::mul_add);
    }
    let parts = a.parts().len();
    assert!(
        start < end && out.len() == parts * g * hd && stats.len() == parts * g,
        "attention shapes"
    );
    // Every block of positions start..end is inside both pools: whole blocks may be read.
    a.check_blocks(start, end);
    // Score columns cover positions p0..p1: 8-aligned, inside the blocks of start..end.
    let (p0, p1) = (start / 8 * 8, end.next_multiple_of(8));
    let lp = p1 - p0;
    let (s0, len) = (start - p0, end - start);
    scores.clear();
    scores.resize(g.next_multiple_of(H) * lp, 0.0);
    let kp = a.keys.as_ptr() as *const u16;
    let vp = a.values.as_ptr() as *const u16;
    // The group's queries, scaled, as `qs[d * H + h]` (zero past the group's heads).
    let mut qs = vec![0f32; hd * H];
    for h0 in (0..g).step_by(H) {
        let gh = (g - h0).min(H);
        for d in 0..hd {
            for h in 0..H {
                qs[d * H + h] = if h < gh {
                    a.q[(h0 + h) * hd + d] * a.scale
                } else {
                    0.0
                };
            }
        }
        // Scores over a block's 16 positions, or over 8 of them alone where p0..p1 covers
        // only half of the first or last block. Each score is still one FMA chain over d,
        // so the numbers do not depend on the pairing. Each block's place is read from the
        // table two blocks ahead (as for the values below): the loads of its keys then
        // wait on no table read.
        let last = p1.div_ceil(KEY_BLOCK) - 1;
        let place = |b: usize| a.block(b.min(last));
        let (mut next, mut after) = (place(p0 / KEY_BLOCK), place(p0 / KEY_BLOCK + 1));
        for (b, run) in block_runs(p0, p1) {
            // p0 and p1 are multiples of 8: the run is 8 or 16 positions, from position
            // 0 or 8 of the block.
            let (lo, two) = (run.start % KEY_BLOCK, run.len() == 16);
            // Block b's place: the runs are of consecutive blocks from p0 / 16.
            let at = next;
            (next, after) = (after, place(b + 2));
            // SAFETY: `check_blocks` saw block b (it holds positions of start..end) inside
            // both pools, so the keys at `at + d * 16 + lo..+8` (and `+8..+16` when `two`,
            // then lo = 0) for every d < hd, and the values at `at..at + 16 * hd`, are in
            // bounds; `qs` has hd * H values; `scores` has H * lp room from row h0, and
            // these stores end at run.end - p0 <= lp. Prefetches never fault.
            unsafe {
                if h0 == 0 {
                    // Ask for the values of these positions now: the weighted sum reads
                    // them after all the scores, and a decode step finds them in memory,
                    // not in cache (the weights streamed through since the last step).
                    let (v0, v1) = (run.start.max(start), run.end.min(end));
                    let (v0, v1) = (v0 % KEY_BLOCK, (v1 - 1) % KEY_BLOCK + 1);
                    prefetch_halves::<_MM_HINT_T0>(vp, at + v0 * hd, at + v1 * hd);
                }
                let kb = kp.add(at + lo);
                let o = scores.as_mut_ptr().add(h0 * lp + run.start - p0);
                // Two key vectors per broadcast query (8 independent FMA chains, where 4
                // would wait on the FMA latency), or one.
                if two {
                    store_scores(score_keys::<H, 2>(kb, qs.as_ptr(), H, hd), H, o, lp);
                } else {
                    store_scores(score_keys::<H, 1>(kb, qs.as_ptr(), H, hd), H, o, lp);
                }
            }
        }
        if let Some(cap) = a.softcap {
            for h in 0..gh {
                let s = &mut scores[(h0 + h) * lp + s0..(h0 + h) * lp + s0 + len];
                for x in s.iter_mut() {
                    *x = cap * (*x / cap).tanh();
                }
            }
        }
        // Each part (`ATTN_PART`) its own softmax and weighted sum, into its own output.
        for (i, c) in a.parts().enumerate() {
            let part = a.part(c).expect("a part of the row");
            let (out, stats) = (&mut out[i * g * hd..][..g * hd], &mut stats[i * g..][..g]);
            let mut inv = [0f32; H];
            for (h, inv) in inv.iter_mut().enumerate().take(gh) {
                let row = (h0 + h) * lp;
                let s = &mut scores[row + part.start - p0..row + part.len - p0];
                stats[h0 + h] = crate::plain::softmax_unnormalised(s);
                *inv = 1.0 / stats[h0 + h].sum;
            }
            for c0 in (0..hd).step_by(16) {
                let strips = ((hd - c0) / 8).min(2);
                // SAFETY: `check_blocks` saw the blocks of start..end, which hold the
                // part's, inside `values`; columns c0 + 8i < hd; row h0 + h <
                // g.next_multiple_of(H) of `scores` has lp weights from p0.
                unsafe {
                    let w = scores.as_ptr().add(h0 * lp).wrapping_sub(p0);
                    // One or two vectors of columns, fixed in each loop.
                    let acc = if strips == 2 {
                        weigh_values::<H, 2>(&part, w, lp, c0)
                    } else {
                        weigh_values::<H, 1>(&part, w, lp, c0).map(|[x]| [x, x])
                    };
                    for (h, acc) in acc.iter().enumerate().take(gh) {
                        for (i, acc) in acc.iter().enumerate().take(strips) {
                            let o = out.as_mut_ptr().add((h0 + h) * hd + c0 + 8 * i);
                            _mm256_storeu_ps(o, _mm256_mul_ps(*acc, _mm256_set1_ps(inv[h])));
                        }
                    }
                }
            }
        }
    }
}

/// The scores of `8 * N` positions of one block (keys of dimension `d` at
/// `kb[d * 16..]`) for `H` queries (scaled, dimension `d` of query `h` at
/// `qs[d * stride + h]`): one FMA chain over `d` each. With the count of vectors fixed,
/// the loop over `d` has no branch.
///
/// # Safety
/// The keys and queries read are in bounds.
#[inline(always)]
pub(crate) unsafe fn score_keys<const H: usize, const N: usize>(
    kb: *const u16,
    qs: *const f32,
    stride: usize,
    hd: usize,
) -> [[__m256; N]; H] {
    // SAFETY: forwarded from the caller.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); N]; H];
        for d in 0..hd {
            let mut k = [_mm256_setzero_ps(); N];
            for (i, k) in k.iter_mut().enumerate() {
                let at = kb.add(d * KEY_BLOCK + 8 * i);
                *k = _mm256_cvtph_ps(_mm_loadu_si128(at as *const __m128i));
            }
            let qd = qs.add(d * stride);
            for (h, acc) in acc.iter_mut().enumerate() {
                let w = _mm256_broadcast_ss(&*qd.add(h));
                for (acc, k) in acc.iter_mut().zip(k) {
                    *acc = _mm256_fmadd_ps(w, k, *acc);
                }
            }
        }
        acc
    }
}

/// Stores the first `count` of `H` queries' scores of `8 * N` positions, query `h`'s at
/// `o[h * lp..]`.
///
/// # Safety
/// The stores are in bounds.
#[inline(always)]
pub(crate) unsafe fn store_scores<const H: usize, const N: usize>(
    acc: [[__m256; N]; H],
    count: usize,
    o: *mut f32,
    lp: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        for (h, acc) in acc.iter().enumerate().take(count) {
            for (i, acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(o.add(h * lp + 8 * i), *acc);
            }
        }
    }
}

/// The weighted sums of the values of positions `a.start..a.len`, columns
/// `c0..c0 + 8 * N`, for `H` heads (head `h`'s weight of position `p` at `w[h * lp + p]`),
/// a block at a time and in order of position.
///
/// # Safety
/// The blocks of `a.start..a.len` are inside `a.values` (`check_blocks`),
/// `c0 + 8 * N <= a.hd`, and every weight read is in bounds.
#[inline(always)]
unsafe fn weigh_values<const H: usize, const N: usize>(
    a: &Attn,
    w: *const f32,
    lp: usize,
    c0: usize,
) -> [[__m256; N]; H] {
    // SAFETY: forwarded from the caller; a position's values are at `(p % 16) * hd` in
    // its block.
    unsafe {
        let (vp, hd) = (a.values.as_ptr() as *const u16, a.hd);
        let mut acc = [[_mm256_setzero_ps(); N]; H];
        let (start, end) = (a.start, a.len);
        let row = |p: usize| vp.add(a.block(p / KEY_BLOCK) + p % KEY_BLOCK * hd + c0);
        // The positions before the first block boundary, then whole blocks (16 rows `hd`
        // apart from where the table puts the block: one table read and a fixed count; a
        // loop over each block's part of the range measured 5% slower), then the rest.
        let head = start.next_multiple_of(KEY_BLOCK).min(end);
        for p in start..head {
            acc = weigh_position(acc, row(p), w.wrapping_add(p), lp);
        }
        let whole = end / KEY_BLOCK * KEY_BLOCK;
        let blocks = head / KEY_BLOCK..whole / KEY_BLOCK;
        if !blocks.is_empty() {
            let last = blocks.end - 1;
            // Where each block's rows start is read from the table two blocks ahead, so
            // that the loads of a block's first rows wait on no table read (as fast as a
            // contiguous layout then; a lookup at the block measured 2-4% slower).
            let base = |b: usize| vp.add(a.block(b.min(last)) + c0);
            let (mut next, mut after) = (base(blocks.start), base(blocks.start + 1));
            // The values `layout::VALUES_AHEAD` blocks on, into L2: the score pass asked
            // for them into L1, but a long row's keys have pushed them out since.
            let va = crate::layout::attention_values_ahead();
            for b in blocks {
                if va > 0 && c0 == 0 && b + va <= last {
                    let ahead = a.block(b + va);
                    prefetch_halves::<_MM_HINT_T1>(vp, ahead, ahead + hd * KEY_BLOCK);
                }
                let mut at = next;
                (next, after) = (after, base(b + 2));
                let mut wp = w.wrapping_add(b * KEY_BLOCK);
                for _ in 0..KEY_BLOCK {
                    acc = weigh_position(acc, at, wp, lp);
                    (at, wp) = (at.wrapping_add(hd), wp.wrapping_add(1));
                }
            }
        }
        for p in whole.max(head)..end {
            acc = weigh_position(acc, row(p), w.wrapping_add(p), lp);
        }
        acc
    }
}

/// Adds one position's values (`N` vectors of 8 at `row`) times each head's weight
/// (`w[h * lp]`) to its accumulators.
///
/// # Safety
/// The values at `row` and the weights read are in bounds.
#[inline(always)]
unsafe fn weigh_position<const H: usize, const N: usize>(
    mut acc: [[__m256; N]; H],
    row: *const u16,
    w: *const f32,
    lp: usize,
) -> [[__m256; N]; H] {
    // SAFETY: forwarded from the caller.
    unsafe {
        let mut v = [_mm256_setzero_ps(); N];
        for (i, v) in v.iter_mut().enumerate() {
            *v = _mm256_cvtph_ps(_mm_loadu_si128(row.add(8 * i) as *const __m128i));
        }
        for (h, acc) in acc.iter_mut().enumerate() {
            let wh = _mm256_broadcast_ss(&*w.wrapping_add(h * lp));
            for (acc, v) in acc.iter_mut().zip(v) {
                *acc = _mm256_fmadd_ps(wh, v, *acc);
            }
        }
        acc
    }
}

/// `g = silu(g) * u`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    crate::plain::silu_body(gate, up)
}

/// `g = gelu(g) * u` (tanh approximation).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    crate::plain::gelu_body(gate, up)
}

/// `a · b`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    crate::plain::dot_body(a, b, f32::mul_add)
}

/// `x · w` for 16-bit weights widened in registers (`BF`: bfloat16, else IEEE half with
/// F16C), in the order of `dense::dot16_portable`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot16<const BF: bool>(x: &[f32], w: &[u16]) -> f32 {
    let n = x.len().min(w.len()) / 8 * 8;
    // SAFETY: loads stay within the first `n` elements of both slices.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        while i < n {
            let raw = _mm_loadu_si128(w.as_ptr().add(i) as *const __m128i);
            let wv = if BF {
                _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16))
            } else {
                _mm256_cvtph_ps(raw)
            };
            acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x.as_ptr().add(i)), acc);
            i += 8;
        }
        let mut l = [0f32; 8];
        _mm256_storeu_ps(l.as_mut_ptr(), acc);
        let mut s = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
        for j in n..x.len().min(w.len()) {
            let b = *w.get_unchecked(j);
            let wf = if BF {
                f32::from_bits((b as u32) << 16)
            } else {
                half::f16::from_bits(b).to_f32()
            };
            s = wf.mul_add(*x.get_unchecked(j), s);
        }
        s
    }
}

/// The largest value (see `softmax::max_value`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn max_body(values: &[f32]) -> f32 {
    crate::plain::max_body(values)
}

/// Temperature weights and their total (see `softmax::exp_weights`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn weights_body(logits: &[f32], max: f32, t: f32, w: &mut [f32]) -> f64 {
    crate::plain::weights_body(logits, max, t, w)
}

/// The softmax normaliser (see `softmax::exp_sum`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn exp_sum_body(logits: &[f32], max: f32) -> f32 {
    crate::plain::exp_sum_body(logits, max)
}

/// Bin indices of logits (see `softmax::bin_indices`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn bins_body(logits: &[f32], max: f32, scale: f32, last: u16, bins: &mut [u16]) {
    crate::plain::bins_body(logits, max, scale, last, bins)
}
