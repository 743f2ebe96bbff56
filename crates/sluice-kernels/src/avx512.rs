//! Every AVX-512 kernel (AVX-512F/BW/VNNI with FMA and F16C): the integer matmul of
//! `PackedMatrix`, activation quantisation, attention, and the f32 helpers. Each function
//! here is `unsafe` only because it needs those CPU features; `Simd::current` checks them
//! once and the safe wrappers in the other files dispatch here.

use std::arch::x86_64::*;

use crate::acts::{ABLOCK, Out, QuantActs};
use crate::attention::{Attn, KEY_BLOCK, key_index, softmax_unnormalised};
use crate::avx2::prefetch_values;
use crate::avx2_matmul::{PREFETCH_AHEAD, PREFETCH_ROWS};
use crate::packed::{GROUP, PackedMatrix, Part, ROWS};

/// Loads 16 scale lanes (f16 or f32).
#[inline(always)]
unsafe fn lanes512(p: *const u8, half: bool) -> __m512 {
    // SAFETY: `p` holds 16 scales of the stored width; avx512f enabled by the caller.
    unsafe {
        if half {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        } else {
            _mm512_loadu_ps(p as *const f32)
        }
    }
}

/// Group `g` against activation rows `i0..i0 + R`: 16 lanes per row.
#[inline(always)]
unsafe fn tile512<const NIB: bool, const BK: usize, const R: usize>(
    p: &PackedMatrix,
    a: &QuantActs,
    g: usize,
    i0: usize,
) -> [__m512; R] {
    let chunks = BK / 4;
    let nb = p.blocks();
    let cols = a.cols;
    let sums = a.sums(BK);
    // SAFETY (whole body): `quants`/`scales` point at full blocks; activation rows
    // i0..i0+R exist (checked by `matmul_groups_at`), so every 4-byte read at
    // `row * cols + b * BK + 4c` is in bounds; the features are enabled by the caller.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); R];
        let low = _mm512_set1_epi8(0x0F);
        let xq = a.q.as_ptr();
        let qb = p.block_quant_bytes();
        for b in 0..nb {
            let q = p.quants(g, b);
            if a.n <= PREFETCH_ROWS {
                // Few rows (decode) read the weights from memory: asked for ahead, as in
                // the AVX2 kernel (one decode token 5.33 -> 4.44 ms on SmolLM2 Q4_K_M,
                // 10.9 -> 9.9 ms on Gemma 3, alternating in one process). A prefetch
                // never faults.
                for l in (0..qb).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(q.wrapping_add(PREFETCH_AHEAD + l) as *const i8);
                }
            }
            let mut w = [_mm512_setzero_si512(); 8];
            if NIB {
                for v in 0..chunks / 2 {
                    let raw = _mm512_loadu_si512(q.add(64 * v) as *const __m512i);
                    w[v] = _mm512_and_si512(raw, low);
                    w[v + chunks / 2] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
                }
            } else {
                for (c, wc) in w.iter_mut().enumerate().take(chunks) {
                    *wc = _mm512_loadu_si512(q.add(64 * c) as *const __m512i);
                }
            }
            let (dp, mp) = p.scales(g, b);
            let (dw, mw) = (lanes512(dp, p.half), lanes512(mp, p.half));
            // A macro, not a closure: a closure does not inherit the caller's target
            // features and was not inlined (25x slower).
            macro_rules! at {
                ($k:expr, $acc:expr) => {{
                    let row = i0 + $k;
                    let x = xq.add(row * cols + b * BK) as *const i32;
                    let da = *a.d.get_unchecked((row * cols + b * BK) / 32);
                    let s = *sums.get_unchecked(row * nb + b);
                    row_block::<BK>(R == 1, $acc, &w, x, dw, mw, da, s)
                }};
            }
            const { assert!(ROWS == 8) };
            if R == ROWS {
                // Unrolled by hand so the accumulators stay in registers: as a loop, LLVM
                // kept them on the stack and every block paid a store and a reload per
                // row (a third of the kernel's samples).
                macro_rules! rows {
                    ($($k:literal)*) => { $(acc[$k] = at!($k, acc[$k]);)* };
                }
                rows!(0 1 2 3 4 5 6 7);
            } else {
                for (k, acc) in acc.iter_mut().enumerate() {
                    *acc = at!(k, *acc);
                }
            }
        }
        acc
    }
}

/// One activation row against one block of a group: the block's integer sums, scaled,
/// added to `acc` (taken and returned by value so it stays in a register).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn row_block<const BK: usize>(
    lone: bool,
    acc: __m512,
    w: &[__m512i; 8],
    x: *const i32,
    dw: __m512,
    mw: __m512,
    da: f32,
    s: f32,
) -> __m512 {
    // SAFETY: `x` points at the row's BK activation bytes (checked by the caller).
    unsafe {
        // Rows of a tile are independent chains enough; a lone row (decode) splits its
        // sum in two to halve the chain of `vpdpbusd` latencies.
        let mut sum = [_mm512_setzero_si512(); 2];
        for (c, wc) in w.iter().enumerate().take(BK / 4) {
            let k = if lone { c % 2 } else { 0 };
            sum[k] = _mm512_dpbusd_epi32(sum[k], *wc, _mm512_set1_epi32(x.add(c).read_unaligned()));
        }
        let sum = if lone {
            _mm512_add_epi32(sum[0], sum[1])
        } else {
            sum[0]
        };
        let isum = _mm512_cvtepi32_ps(sum);
        let acc = _mm512_fmadd_ps(isum, _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc);
        _mm512_fmadd_ps(mw, _mm512_set1_ps(s), acc)
    }
}

/// Writes group `g`'s 16 lanes of activation row `i` to `y`: straight for the groups
/// before `full` (all 16 rows real; copying each through `store` was 1.5% of a SmolLM2
/// prefill), through `PackedMatrix::store` for the last, partial one.
#[inline(always)]
unsafe fn put(
    p: &PackedMatrix,
    full: usize,
    g: usize,
    i: usize,
    v: __m512,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY: in bounds and exclusive by the caller's contract (`matmul_groups_at`).
    unsafe {
        if g < full {
            _mm512_storeu_ps(y.add(i * stride + g * GROUP), v);
            return;
        }
        let mut lanes = [0f32; GROUP];
        _mm512_storeu_ps(lanes.as_mut_ptr(), v);
        p.store(g, i, &lanes, y, stride);
    }
}

#[inline(always)]
unsafe fn run512<const NIB: bool, const BK: usize>(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY (whole body): as in `tile512`; `put` writes inside the caller's range.
    unsafe {
        let full = p.rows() / GROUP;
        let end = part.rows.end;
        for g in part.groups.clone() {
            let mut i = part.rows.start;
            while i + ROWS <= end {
                let acc = tile512::<NIB, BK, ROWS>(p, a, g, i);
                for (k, v) in acc.iter().enumerate() {
                    put(p, full, g, i + k, *v, y, stride);
                }
                i += ROWS;
            }
            while i < end {
                let acc = tile512::<NIB, BK, 1>(p, a, g, i);
                put(p, full, g, i, acc[0], y, stride);
                i += 1;
            }
        }
    }
}

/// The AVX-512 VNNI kernel for one part of a matmul.
///
/// # Safety
/// The CPU has the enabled features; shapes checked and `y` exclusive as in
/// `PackedMatrix::matmul_groups_at`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
pub(crate) unsafe fn packed_groups(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY: forwarded.
    unsafe {
        match (p.nibbles, p.bk) {
            (true, 32) => run512::<true, 32>(p, a, part, y, stride),
            (false, 32) => run512::<false, 32>(p, a, part, y, stride),
            (false, 16) => run512::<false, 16>(p, a, part, y, stride),
            other => unreachable!("layout {other:?}"),
        }
    }
}

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
                let sums = crate::acts::quantise_block(xb, qb);
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
/// A decode step reads a slot's keys and values from memory: the next key block and this
/// block's values are asked for while the scores are taken.
#[target_feature(enable = "avx512f,avx512bw,fma,f16c")]
pub(crate) unsafe fn attend(a: &Attn, scores: &mut Vec<f32>, out: &mut [f32]) {
    // SAFETY: forwarded (the features are this function's).
    unsafe {
        match a.q.len() / a.hd {
            1 => attend_heads::<1>(a, scores, out),
            2 => attend_heads::<2>(a, scores, out),
            3 => attend_heads::<3>(a, scores, out),
            _ => attend_heads::<4>(a, scores, out),
        }
    }
}

/// `attend` taking the group's heads `H` at a time (a smaller group in one pass with no
/// idle lanes).
#[inline(always)]
unsafe fn attend_heads<const H: usize>(a: &Attn, scores: &mut Vec<f32>, out: &mut [f32]) {
    let hd = a.hd;
    let g = a.q.len() / hd;
    let len = a.values.len() / hd;
    let lp = len.next_multiple_of(16);
    assert!(
        len <= a.stride && a.stride.is_multiple_of(16) && a.keys_t.len() >= hd * a.stride,
        "attention shapes"
    );
    assert!(
        out.len() == g * hd && hd.is_multiple_of(16),
        "attention output"
    );
    scores.clear();
    scores.resize(g.next_multiple_of(H) * lp, 0.0);
    let kp = a.keys_t.as_ptr() as *const u16;
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
        let mut p = 0;
        while p < len {
            // SAFETY: p + 16 <= stride (both multiples of 16, p < len <= stride), so key
            // block p / 16, which holds the 16 keys of every dimension d < hd, is inside
            // `keys_t`; scores has H * lp room; prefetches never fault.
            unsafe {
                let kb = kp.add(key_index(hd, 0, p));
                if h0 == 0 {
                    // The next key block (contiguous halves), and this block's values.
                    let next = key_index(hd, 0, p) + hd * KEY_BLOCK;
                    prefetch_values(kp, next, next + hd * KEY_BLOCK);
                    prefetch_values(vp, p * hd, (p + 16).min(len) * hd);
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
                    _mm512_storeu_ps(scores.as_mut_ptr().add((h0 + h) * lp + p), *acc);
                }
            }
            p += 16;
        }
        let mut inv = [0f32; H];
        for (h, inv) in inv.iter_mut().enumerate().take(gh) {
            *inv = softmax_unnormalised(&mut scores[(h0 + h) * lp..(h0 + h) * lp + len]);
        }
        for c0 in (0..hd).step_by(64) {
            let strips = ((hd - c0) / 16).min(4);
            // SAFETY: every value row p < len has hd halves; columns c0 + 16i < hd.
            unsafe {
                let mut acc = [[_mm512_setzero_ps(); 4]; H];
                for p in 0..len {
                    let mut v = [_mm512_setzero_ps(); 4];
                    for (i, v) in v.iter_mut().enumerate().take(strips) {
                        *v = _mm512_cvtph_ps(_mm256_loadu_si256(
                            vp.add(p * hd + c0 + 16 * i) as *const __m256i
                        ));
                    }
                    for (h, acc) in acc.iter_mut().enumerate() {
                        let w = _mm512_set1_ps(*scores.get_unchecked((h0 + h) * lp + p));
                        for i in 0..4 {
                            acc[i] = _mm512_fmadd_ps(w, v[i], acc[i]);
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
    crate::simd::dot_body(a, b, f32::mul_add)
}

/// `g = silu(g) * u`.
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    crate::activation::silu_body(gate, up)
}

/// `g = gelu(g) * u` (tanh approximation).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    crate::activation::gelu_body(gate, up)
}

/// The largest value (see `softmax::max_value`).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn max_body(values: &[f32]) -> f32 {
    crate::softmax::max_body(values)
}

/// Temperature weights and their total (see `softmax::exp_weights`).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn weights_body(logits: &[f32], max: f32, t: f32, w: &mut [f32]) -> f64 {
    crate::softmax::weights_body(logits, max, t, w)
}

/// The softmax normaliser (see `softmax::exp_sum`).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn exp_sum_body(logits: &[f32], max: f32) -> f32 {
    crate::softmax::exp_sum_body(logits, max)
}

/// Bin indices of logits (see `softmax::bin_indices`).
#[target_feature(enable = "avx512f,fma")]
pub(crate) unsafe fn bins_body(logits: &[f32], max: f32, scale: f32, last: u16, bins: &mut [u16]) {
    crate::softmax::bins_body(logits, max, scale, last, bins)
}
