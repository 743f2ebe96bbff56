//! The AVX-512 kernels (AVX-512F/BW with FMA and F16C) of activation quantisation,
//! attention, and the f32 helpers; the matmul is in `matmul.rs`, compiled here with and
//! without GFNI (`packed_groups`). Each function here is `unsafe` only because it needs
//! those CPU features; `Simd::current` checks them once and the safe wrappers in the
//! other files dispatch here.

pub(crate) mod matmul;
pub(crate) mod rows;

use std::arch::x86_64::*;

use crate::layout::{
    ABLOCK, Attn, KEY_BLOCK, Out, PackedMatrix, Part, PartStat, QuantActs, block_runs,
};
use crate::plain::softmax_unnormalised;
use crate::x86::avx2::prefetch_halves;

#[target_feature(enable = "avx512f,avx512bw,fma")]
pub(crate) unsafe fn quantise(a: &mut Out, x: &[f32]) {
    for (b, xb) in x.chunks_exact(ABLOCK).enumerate() {
        let qb = a.block(b);
        // SAFETY: `xb` and `qb` hold 32 elements each; avx512f/bw are enabled.
        unsafe {
            let v0 = _mm512_loadu_ps(xb.as_ptr());
            let v1 = _mm512_loadu_ps(xb.as_ptr().add(16));
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            // A NaN or infinity, or a scale whose inverse overflows: the plain loop's
            // saturation is not the conversion's, so it takes the block.
            if !amax.is_finite() || !id.is_finite() || has_nan(v0, v1) {
                let sums = crate::plain::quantise_block(xb, qb);
                a.put(b, sums);
                continue;
            }
            let id = _mm512_set1_ps(id);
            // Round to nearest even (the default MXCSR mode), as `round_ties_even`.
            let q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
            let q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
            _mm_storeu_si128(qb.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128(
                qb.as_mut_ptr().add(16) as *mut __m128i,
                _mm512_cvtepi32_epi8(q1),
            );
            let (s0, s1) = (_mm512_reduce_add_epi32(q0), _mm512_reduce_add_epi32(q1));
            a.put(b, (s0, s1, d));
        }
    }
}

#[inline(always)]
unsafe fn has_nan(v0: __m512, v1: __m512) -> bool {
    // SAFETY: avx512f enabled by the caller.
    unsafe {
        _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v0, v0) | _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v1, v1) != 0
    }
}

/// AVX-512: 16 positions' scores at a time for the heads of the group, up to 4 at a time
/// (one f16 key row load feeds each of them), then the values in 64-wide column strips.
/// A block of 16 positions at a time, found through the table. A decode step reads a
/// sequence's keys and values from memory: the next key block and this block's values are
/// asked for while the scores are taken, and the weighted sums ask for the values
/// `layout::VALUES_AHEAD` blocks ahead into L2 (a long row's keys have pushed the first
/// ones out of L1 by then). Each part of the row (`ATTN_PART`) takes its own softmax and
/// sum: `out` is parts x g x hd, `stats` parts x g.
#[target_feature(enable = "avx512f,avx512bw,fma,f16c")]
pub(crate) unsafe fn attend(
    a: &Attn,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [PartStat],
) {
    // SAFETY: forwarded (the features are this function's).
    unsafe {
        match a.q.len() / a.hd {
            1 => attend_heads::<1>(a, scores, out, stats),
            2 => attend_heads::<2>(a, scores, out, stats),
            3 => attend_heads::<3>(a, scores, out, stats),
            _ => attend_heads::<4>(a, scores, out, stats),
        }
    }
}

/// `attend` taking the group's heads `H` at a time (a smaller group in one pass with no
/// idle lanes).
#[inline(always)]
unsafe fn attend_heads<const H: usize>(
    a: &Attn,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [PartStat],
) {
    let hd = a.hd;
    let g = a.q.len() / hd;
    let (start, len) = (a.start, a.len);
    let parts = a.parts().len();
    assert!(
        a.plain()
            && start < len
            && out.len() == parts * g * hd
            && stats.len() == parts * g
            && hd.is_multiple_of(16),
        "attention shapes"
    );
    // Every block of positions start..len is inside both pools: whole blocks may be read.
    a.check_blocks(start, len);
    // Score columns cover the whole blocks of start..len, from position p0.
    let (b0, b1) = (start / KEY_BLOCK, len.div_ceil(KEY_BLOCK));
    let p0 = b0 * KEY_BLOCK;
    let lp = b1 * KEY_BLOCK - p0;
    scores.clear();
    scores.resize(g.next_multiple_of(H) * lp, 0.0);
    let kp = a.keys.as_ptr() as *const u16;
    let vp = a.values.as_ptr() as *const u16;
    // The pass's queries, scaled, as `qs[d * H + h]` (zero past the group's heads).
    let mut qs = vec![0f32; hd * H];
    for h0 in (0..g).step_by(H) {
        let gh = (g - h0).min(H);
        for (d, qs) in qs.chunks_exact_mut(H).enumerate() {
            for (h, q) in qs.iter_mut().enumerate() {
                *q = if h < gh {
                    a.q[(h0 + h) * hd + d] * a.scale
                } else {
                    0.0
                };
            }
        }
        for b in b0..b1 {
            let p = b * KEY_BLOCK;
            let at = a.block(b);
            // SAFETY: `check_blocks` saw block b inside both pools, so its 16 keys of every
            // dimension d < hd (`at + d * 16..+16`) are in bounds; scores has H * lp room
            // and the stores end at p + 16 - p0 <= lp; prefetches never fault.
            unsafe {
                let kb = kp.add(at);
                if h0 == 0 {
                    // The next key block (contiguous halves, wherever the table puts it),
                    // and this block's values.
                    if b + 1 < b1 {
                        let next = a.block(b + 1);
                        prefetch_halves::<_MM_HINT_T0>(kp, next, next + hd * KEY_BLOCK);
                    }
                    prefetch_halves::<_MM_HINT_T0>(vp, at, at + (len - p).min(KEY_BLOCK) * hd);
                }
                let mut acc = [_mm512_setzero_ps(); H];
                for d in 0..hd {
                    let k = _mm512_cvtph_ps(_mm256_loadu_si256(
                        kb.add(d * KEY_BLOCK) as *const __m256i
                    ));
                    for (h, acc) in acc.iter_mut().enumerate() {
                        *acc =
                            _mm512_fmadd_ps(_mm512_set1_ps(*qs.get_unchecked(d * H + h)), k, *acc);
                    }
                }
                for (h, acc) in acc.iter().enumerate() {
                    _mm512_storeu_ps(scores.as_mut_ptr().add((h0 + h) * lp + p - p0), *acc);
                }
            }
        }
        // Each part (`ATTN_PART`) its own softmax and weighted sum, into its own output.
        for (i, c) in a.parts().enumerate() {
            let part = a.part(c).expect("a part of the row");
            let (ps, pe) = (part.start, part.len);
            let (out, stats) = (&mut out[i * g * hd..][..g * hd], &mut stats[i * g..][..g]);
            let mut inv = [0f32; H];
            for (h, inv) in inv.iter_mut().enumerate().take(gh) {
                let row = (h0 + h) * lp;
                stats[h0 + h] = softmax_unnormalised(&mut scores[row + ps - p0..row + pe - p0]);
                *inv = 1.0 / stats[h0 + h].sum;
            }
            // SAFETY: `check_blocks` saw the blocks of start..len, which hold ps..pe; the
            // scores of heads h0..h0 + gh have lp entries from p0.
            unsafe { weigh_part::<H>(a, scores, lp, p0, (h0, gh), (ps, pe), &inv, out) };
        }
    }
}

/// The weighted sums of positions `ps..pe` for heads `h0..h0 + gh` (weights in `scores`,
/// head `h`'s at `[h * lp..]` from position `p0`), times each head's `inv`, into `out`.
///
/// # Safety
/// The CPU must have AVX-512F and F16C (it is inlined into `attend`, which enables them);
/// the blocks of `ps..pe` must be inside `a.values` (`Attn::check_blocks`), `scores` must
/// hold `lp` weights from `p0` for heads up to `h0 + H`, `p0 <= ps < pe <= p0 + lp`, and
/// `out` `(h0 + gh) * hd` values.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn weigh_part<const H: usize>(
    a: &Attn,
    scores: &[f32],
    lp: usize,
    p0: usize,
    (h0, gh): (usize, usize),
    (ps, pe): (usize, usize),
    inv: &[f32; H],
    out: &mut [f32],
) {
    let hd = a.hd;
    let vp = a.values.as_ptr() as *const u16;
    let va = crate::layout::attention_values_ahead();
    {
        for c0 in (0..hd).step_by(64) {
            let strips = ((hd - c0) / 16).min(4);
            // SAFETY: the block of every position ps <= p < pe is inside `values`
            // (`check_blocks` saw start..len, which holds them) and holds the position's
            // hd halves at `(p % 16) * hd`; columns c0 + 16i < hd; weights are read
            // inside `scores`. Block b + va is looked up only when it starts before pe, so
            // inside the row's table; prefetches never fault.
            unsafe {
                let mut acc = [[_mm512_setzero_ps(); 4]; H];
                for (b, run) in block_runs(ps, pe) {
                    if va > 0 && c0 == 0 && (b + va) * KEY_BLOCK < pe {
                        let next = a.block(b + va);
                        prefetch_halves::<_MM_HINT_T1>(vp, next, next + hd * KEY_BLOCK);
                    }
                    let vb = vp.add(a.block(b) + c0);
                    for p in run {
                        let row = vb.add(p % KEY_BLOCK * hd);
                        let mut v = [_mm512_setzero_ps(); 4];
                        for (i, v) in v.iter_mut().enumerate().take(strips) {
                            *v = _mm512_cvtph_ps(_mm256_loadu_si256(
                                row.add(16 * i) as *const __m256i
                            ));
                        }
                        for (h, acc) in acc.iter_mut().enumerate() {
                            let w = _mm512_set1_ps(*scores.get_unchecked((h0 + h) * lp + p - p0));
                            for i in 0..4 {
                                acc[i] = _mm512_fmadd_ps(w, v[i], acc[i]);
                            }
                        }
                    }
                }
                for (h, acc) in acc.iter().enumerate().take(gh) {
                    for (i, acc) in acc.iter().enumerate().take(strips) {
                        let o = out.as_mut_ptr().add((h0 + h) * hd + c0 + 16 * i);
                        _mm512_storeu_ps(o, _mm512_mul_ps(*acc, _mm512_set1_ps(inv[h])));
                    }
                }
            }
        }
    }
}

/// `a · b`.
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    crate::plain::dot_body(a, b, f32::mul_add)
}

/// `g = silu(g) * u`.
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    crate::plain::silu_body(gate, up)
}

/// `g = gelu(g) * u` (tanh approximation).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    crate::plain::gelu_body(gate, up)
}

/// The largest value (see `softmax::max_value`).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn max_body(values: &[f32]) -> f32 {
    crate::plain::max_body(values)
}

/// Temperature weights and their total (see `softmax::exp_weights`).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn weights_body(logits: &[f32], max: f32, t: f32, w: &mut [f32]) -> f64 {
    crate::plain::weights_body(logits, max, t, w)
}

/// The softmax normaliser (see `softmax::exp_sum`).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn exp_sum_body(logits: &[f32], max: f32) -> f32 {
    crate::plain::exp_sum_body(logits, max)
}

/// Bin indices of logits (see `softmax::bin_indices`).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn bins_body(logits: &[f32], max: f32, scale: f32, last: u16, bins: &mut [u16]) {
    crate::plain::bins_body(logits, max, scale, last, bins)
}

/// The AVX-512 VNNI kernel for one part of a matmul. `fold`: the `FOLDS` entry of the
/// matrix's offset when it is taken inside the integer sum (`packed::fold512`). Nibbles
/// are split with GFNI where the CPU has it (`layout::gfni`).
///
/// # Safety
/// The CPU has the enabled features; shapes checked and `y` exclusive as in
/// `PackedMatrix::matmul_groups_at`.
pub(crate) unsafe fn packed_groups(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
    fold: Option<usize>,
) {
    // SAFETY: forwarded; `gfni` is only on where the CPU has the feature.
    unsafe {
        if crate::layout::gfni() {
            with_gfni(p, a, part, y, stride, fold)
        } else {
            without_gfni(p, a, part, y, stride, fold)
        }
    }
}

/// `packed_groups` splitting nibbles with GFNI.
///
/// # Safety
/// As `packed_groups`, and the CPU has GFNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c,gfni")]
unsafe fn with_gfni(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
    fold: Option<usize>,
) {
    // SAFETY: forwarded.
    unsafe { by_layout::<true>(p, a, part, y, stride, fold) }
}

/// `packed_groups` splitting nibbles with a shift and a mask.
///
/// # Safety
/// As `packed_groups`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
unsafe fn without_gfni(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
    fold: Option<usize>,
) {
    // SAFETY: forwarded.
    unsafe { by_layout::<false>(p, a, part, y, stride, fold) }
}

/// The kernel compiled for the matrix's layout.
#[inline(always)]
unsafe fn by_layout<const GF: bool>(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
    fold: Option<usize>,
) {
    // SAFETY: forwarded.
    unsafe {
        match (p.nibbles, p.bk, fold, p.high()) {
            (true, 32, None, 0) => matmul::run::<true, 32, false, 0, GF>(p, a, part, y, stride, 0),
            (true, 32, Some(f), 0) => {
                matmul::run::<true, 32, true, 0, GF>(p, a, part, y, stride, f)
            }
            (true, 32, None, 1) => matmul::run::<true, 32, false, 1, GF>(p, a, part, y, stride, 0),
            (true, 32, Some(f), 1) => {
                matmul::run::<true, 32, true, 1, GF>(p, a, part, y, stride, f)
            }
            (true, 16, None, 2) => matmul::run::<true, 16, false, 2, GF>(p, a, part, y, stride, 0),
            (true, 16, Some(f), 2) => {
                matmul::run::<true, 16, true, 2, GF>(p, a, part, y, stride, f)
            }
            // Whole bytes: nothing to split.
            (false, 32, None, 0) => {
                matmul::run::<false, 32, false, 0, false>(p, a, part, y, stride, 0)
            }
            (false, 32, Some(f), 0) => {
                matmul::run::<false, 32, true, 0, false>(p, a, part, y, stride, f)
            }
            (false, 16, None, 0) => {
                matmul::run::<false, 16, false, 0, false>(p, a, part, y, stride, 0)
            }
            (false, 16, Some(f), 0) => {
                matmul::run::<false, 16, true, 0, false>(p, a, part, y, stride, f)
            }
            other => unreachable!("layout {other:?}"),
        }
    }
}
