//! The AVX2 kernel of activation quantisation (`acts::quantise` is the definition): a
//! block of 32 values in four vectors, rounded to nearest even by `vcvtps2dq` under the
//! default rounding mode as `round_ties_even` rounds. A block the vector path cannot take
//! exactly as the definition does (a scale whose inverse overflows, a NaN) is quantised
//! by the plain loop instead, so every block's bytes and sums are the definition's.

use std::arch::x86_64::*;

use crate::layout::{ABLOCK, Out};
use crate::plain::quantise_block;

/// Quantises the rows `x` into `a`.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn quantise(a: &mut Out, x: &[f32]) {
    for (b, xb) in x.chunks_exact(ABLOCK).enumerate() {
        let qb = a.block(b);
        // SAFETY: `xb` and `qb` hold 32 elements each; avx2 is enabled.
        let sums = unsafe { block(xb, qb) }.unwrap_or_else(|| quantise_block(xb, qb));
        a.put(b, sums);
    }
}

/// One block: the sums of its two halves' quants and its scale, or `None` (nothing
/// written that matters) when the plain loop must take it.
#[inline(always)]
unsafe fn block(xb: &[f32], qb: &mut [i8]) -> Option<(i32, i32, f32)> {
    // SAFETY (whole body): 32 values in and out; avx2 enabled by the caller.
    unsafe {
        let p = xb.as_ptr();
        let v = [0, 8, 16, 24].map(|i| _mm256_loadu_ps(p.add(i)));
        let sign = _mm256_set1_ps(-0.0);
        let abs = v.map(|v| _mm256_andnot_ps(sign, v));
        let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
        let amax = _mm_cvtss_f32(m);
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        // NaN anywhere makes `amax` or a quant wrong; an infinite inverse saturates
        // differently: both go to the plain loop (a quant of -128 flags the NaN below).
        if !id.is_finite() || amax.is_nan() {
            return None;
        }
        let idv = _mm256_set1_ps(id);
        let q = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, idv)));
        // Pack to bytes (in-lane packs interleave the four vectors by 4; the permute
        // restores value order).
        let w = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        if _mm256_movemask_epi8(_mm256_cmpeq_epi8(w, _mm256_set1_epi8(-128))) != 0 {
            return None;
        }
        _mm256_storeu_si256(qb.as_mut_ptr() as *mut __m256i, w);
        let h = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let h = _mm256_hadd_epi32(h, h);
        let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        Some((_mm_cvtsi128_si32(s), _mm_extract_epi32(s, 1), d))
    }
}

/// `acts::lane_sums` (the definition): `vpmaddubsw` against ones gives the 16 sums of
/// adjacent quants, whose even (odd) 16-bit lanes are the low (high) lane sums of each
/// group of 4 columns; adding the 4 dwords of each 128-bit half sums a block of 16.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn lane_sums(q: &[i8], l32: &mut [i32], l16: &mut [i32]) {
    let ones = _mm256_set1_epi8(1);
    for (b, qb) in q.chunks_exact(ABLOCK).enumerate() {
        // SAFETY: `qb` holds 32 bytes; avx2 enabled.
        unsafe {
            let v = _mm256_loadu_si256(qb.as_ptr() as *const __m256i);
            let pairs = _mm256_maddubs_epi16(ones, v);
            // Each 128-bit half: dwords 0 + 2, 1 + 3, then both (at most 16 · 127: no
            // 16-bit overflow), negated.
            let s = _mm256_add_epi16(pairs, _mm256_shuffle_epi32(pairs, 0b01_00_11_10));
            let s = _mm256_add_epi16(s, _mm256_shuffle_epi32(s, 0b10_11_00_01));
            let s = _mm256_sub_epi16(_mm256_setzero_si256(), s);
            let (lo, hi) = (_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            l16[2 * b] = _mm_cvtsi128_si32(lo);
            l16[2 * b + 1] = _mm_cvtsi128_si32(hi);
            l32[b] = _mm_cvtsi128_si32(_mm_add_epi16(lo, hi));
        }
    }
}
