//! One activation row against a weight group (`lone`): every row of a decode step, and
//! the rows of a larger matmul past its last whole tile.
//!
//! A decode step streams every weight once, so this loop is what bounds it. The loop is
//! compiled for the common cases with the prefetch hint and the scales' storage fixed
//! (`lone_as`): the per-block branches on them, the index arithmetic of a run-time block
//! size and the division that finds a block's super-block are gone, and factored scales
//! convert their super-block's f16 factors once per super-block, not once per block. The
//! numbers are the same as the general form's: the same values multiplied in the same
//! order.

use std::arch::x86_64::*;

use super::{Group, opaque, row_block, weights};
use crate::layout::{
    GROUP, PF_ANY, PF_L2, PF_OFF, PREFETCH_ROWS, PackedMatrix, QuantActs, SC_ANY, SC_FACTORED,
    SC_HALF, neg_sum, prefetch_case, prefetch_for, scale_case, specialised,
};
use crate::x86::avx2::prefetch_ahead;

/// Group `g` against row-major activation row `i` alone; with `FOLD`, `shift` is the
/// offset's `s`.
#[inline(always)]
pub(super) unsafe fn lone<
    const NIB: bool,
    const BK: usize,
    const FOLD: bool,
    const HIGH: usize,
    const GF: bool,
>(
    p: &PackedMatrix,
    a: &QuantActs,
    g: usize,
    i: usize,
    shift: u32,
) -> __m512 {
    let (ahead, hint) = prefetch_for(NIB);
    // Few rows (decode) read the weights from memory: asked for ahead, as in the AVX2
    // kernel (one decode token 5.33 -> 4.44 ms on SmolLM2 Q4_K_M, 10.9 -> 9.9 ms on
    // Gemma 3, alternating in one process).
    let hint = if a.n <= PREFETCH_ROWS { hint } else { 0 };
    let (pf, sc) = (prefetch_case(a.n, hint), scale_case(p));
    macro_rules! go {
        ($pf:ident, $sc:ident) => {
            lone_as::<NIB, BK, FOLD, HIGH, GF, $pf, $sc>(p, a, g, i, shift, ahead, hint)
        };
    }
    // SAFETY: forwarded (the caller's contract).
    unsafe {
        if !specialised() {
            return go!(PF_ANY, SC_ANY);
        }
        match (pf, sc) {
            (PF_L2, SC_HALF) => go!(PF_L2, SC_HALF),
            (PF_L2, SC_FACTORED) => go!(PF_L2, SC_FACTORED),
            (PF_OFF, SC_HALF) => go!(PF_OFF, SC_HALF),
            (PF_OFF, SC_FACTORED) => go!(PF_OFF, SC_FACTORED),
            _ => go!(PF_ANY, SC_ANY),
        }
    }
}

/// `lone` with the prefetch `PF` and the scales' storage `SC` fixed (`*_ANY`: read at run
/// time).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn lone_as<
    const NIB: bool,
    const BK: usize,
    const FOLD: bool,
    const HIGH: usize,
    const GF: bool,
    const PF: u8,
    const SC: u8,
>(
    p: &PackedMatrix,
    a: &QuantActs,
    g: usize,
    i: usize,
    shift: u32,
    ahead: usize,
    hint: u8,
) -> __m512 {
    let nb = p.blocks();
    let cols = a.cols;
    let sums = a.sums(BK);
    let lanes = if BK == 16 { &a.l16 } else { &a.l32 };
    let qb = const { PackedMatrix::quant_bytes(BK, NIB, HIGH) };
    let group = Group::new(p, g);
    debug_assert_eq!(group.qb, qb);
    debug_assert!(SC != SC_HALF || (group.half && group.factored == 0));
    debug_assert!(SC != SC_FACTORED || group.factored > 0);
    // Blocks per super-block: factored scales' f16 factors are converted once for each.
    let per = if SC == SC_FACTORED { group.factored } else { 1 };
    // SAFETY (whole body): row i exists (checked by `matmul_groups_at`), so every read at
    // `i * cols + b * BK + 4c` and of its block's scale and sums is in bounds; the group's
    // blocks are whole, and its scales stored as `SC` says (checked by `lone`); prefetches
    // never fault; the features are enabled by the caller.
    unsafe {
        let mut acc = _mm512_setzero_ps();
        let mut b = 0;
        let mut sup = 0;
        while b < nb {
            let (dsup, msup) = if SC == SC_FACTORED {
                let at = sup * GROUP * 2;
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(group.ds0.add(at) as *const __m256i));
                let m = if FOLD {
                    d
                } else {
                    _mm512_cvtph_ps(_mm256_loadu_si256(group.ms0.add(at) as *const __m256i))
                };
                (d, m)
            } else {
                (_mm512_setzero_ps(), _mm512_setzero_ps())
            };
            let end = (b + per).min(nb);
            for b in b..end {
                let q = group.q0.add(b * qb);
                match PF {
                    PF_L2 => {
                        for l in (0..qb).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T1>(q.wrapping_add(ahead + l) as *const i8);
                        }
                    }
                    PF_OFF => {}
                    _ => prefetch_ahead(q, qb, ahead, hint),
                }
                let w = weights::<NIB, BK, HIGH, GF>(q, p.high_plane());
                let (dw, mw) = match SC {
                    SC_HALF => {
                        let half = |base: *const u8| {
                            _mm512_cvtph_ps(_mm256_loadu_si256(
                                base.add(b * GROUP * 2) as *const __m256i
                            ))
                        };
                        let dw = half(group.d0);
                        (dw, if FOLD { dw } else { half(group.m0) })
                    }
                    SC_FACTORED => {
                        // As `factored512`: the i8 integers times the super-block's lanes.
                        let ints = |base: *const u8, s: __m512| {
                            let v = _mm_loadu_si128(base.add(b * GROUP) as *const __m128i);
                            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)), s)
                        };
                        let dw = ints(group.d0, dsup);
                        (dw, if FOLD { dw } else { ints(group.m0, msup) })
                    }
                    _ => group.scales::<FOLD>(b),
                };
                let at = i * cols + b * BK;
                let start = if FOLD {
                    let z = neg_sum(*lanes.get_unchecked(i * nb + b));
                    _mm512_set1_epi32(z << shift)
                } else {
                    _mm512_setzero_si512()
                };
                let s = if FOLD {
                    0.0
                } else {
                    *sums.get_unchecked(i * nb + b)
                };
                let x = opaque(a.q.as_ptr().add(at) as *const i32);
                let da = *a.d.get_unchecked(at / 32);
                acc = row_block::<BK, FOLD>(true, acc, &w, x, dw, mw, da, start, s);
            }
            b = end;
            sup += 1;
        }
        acc
    }
}
