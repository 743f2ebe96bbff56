//! Every AVX2 kernel (AVX2 with FMA and F16C): the integer matmul of `PackedMatrix`, and
//! the plain-loop definitions of the other kernels compiled with these features enabled.
//! `unsafe` only because of the CPU features, which `Simd::current` checks once.

use std::arch::x86_64::*;

use crate::acts::QuantActs;
use crate::attention::{Attn, KEY_BLOCK, key_index};
use crate::packed::{GROUP, PackedMatrix, Part};

/// Prefetches the f16 values `vp[lo..hi]` into L1, a cache line (32 values) at a time.
/// A prefetch never faults, so the addresses need not be in bounds.
#[inline(always)]
pub(crate) unsafe fn prefetch_values(vp: *const u16, lo: usize, hi: usize) {
    for at in (lo..hi).step_by(32) {
        // SAFETY: the caller has SSE (every AVX2 CPU does); a prefetch does not fault.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(vp.wrapping_add(at) as *const i8) };
    }
}

/// Bytes ahead of the quants being read that a few-row matmul prefetches. A decode step
/// streams each small matrix from memory once, and the hardware prefetcher ramps up too
/// late for matrices of a few hundred KB: prefetching 2 KB ahead made a decode step's
/// layers 15% faster (`benches/forward`, SmolLM2 and Gemma 3); 1 and 4 KB did no better.
const PREFETCH_AHEAD: usize = 2048;

/// Activation rows up to which a matmul is bound by reading its weights (one tile per
/// group half, so each block is prefetched once).
const PREFETCH_ROWS: usize = 4;

/// 8 scale lanes starting at lane `h * 8`.
#[inline(always)]
unsafe fn lanes256(p: *const u8, half: bool, h: usize) -> __m256 {
    // SAFETY: `p` holds 16 scales; avx and f16c enabled by the caller.
    unsafe {
        if half {
            _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * h) as *const __m128i))
        } else {
            _mm256_loadu_ps((p as *const f32).add(8 * h))
        }
    }
}

/// Activation rows that share each unpacked chunk of weights on AVX2 (the literal in
/// `run256`'s full tiles).
const ROWS256: usize = 6;

/// Chunks whose `vpmaddubsw` pair sums can be added in 16 bits before widening: a pair
/// is at most `2 · max_u · 128`, so 8 chunks of 4-bit quants (and of each 4-bit half of
/// WIDE quants), 4 of 5-bit and 2 of 6-bit stay below 32,768. Signed Q8_0 (|w| up to 128)
/// widens every chunk.
const fn run16(bits: u32, signed: bool) -> usize {
    match (signed, bits) {
        (true, _) => 1,
        (false, 4) => 8,
        (false, 5) => 4,
        _ => 2,
    }
}

/// Half `h` (8 of the 16 rows) of group `g` against activation rows `i0..i0 + R`, one
/// 8-lane accumulator per activation row. Each chunk of a block's quants is unpacked once
/// (nibbles split, high-plane bits merged, quants above 63 split into 4-bit halves for
/// `vpmaddubsw`) and multiplied at once against all `R` rows, whose 16-bit partial sums
/// stay in registers (chunk-outer, so the live set is a few registers per row and nothing
/// spills). Every row's sums are taken in the same order whatever `R` is, and integer sums
/// are exact, so the 16-bit runs change no result.
#[inline(always)]
unsafe fn tile256<
    const NIB: bool,
    const BK: usize,
    const WIDE: bool,
    const SIGNED: bool,
    const BITS: u32,
    const R: usize,
>(
    p: &PackedMatrix,
    a: &QuantActs,
    g: usize,
    h: usize,
    i0: usize,
) -> [__m256; R] {
    let chunks = BK / 4;
    let run = run16(BITS, SIGNED);
    // Bits above the nibble in the high plane (compact 5- and 6-bit quants).
    let high_bits = crate::packed::high_bits(NIB, BITS);
    let nb = p.blocks();
    let cols = a.cols;
    let sums = a.sums(BK);
    let plane_at = p.high_plane();
    // SAFETY (whole body): as in `tile512`; the high plane is 64 bytes inside the block.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let low = _mm256_set1_epi8(0x0F);
        let hmask = _mm256_set1_epi8(if high_bits == 1 { 0x10 } else { 0x30 });
        let sixteen = _mm256_set1_epi16(16);
        let ones = _mm256_set1_epi16(1);
        for b in 0..nb {
            let q = p.quants(g, b);
            if a.n <= PREFETCH_ROWS && h == 0 {
                // A prefetch never faults: the addresses may run past the matrix.
                for l in (0..p.block_quant_bytes()).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(q.wrapping_add(PREFETCH_AHEAD + l) as *const i8);
                }
            }
            let (dp, mp) = p.scales(g, b);
            let x: [*const i32; R] =
                std::array::from_fn(|k| a.q.as_ptr().add((i0 + k) * cols + b * BK) as *const i32);
            let mut isum = [_mm256_setzero_si256(); R];
            let mut part = [_mm256_setzero_si256(); R];
            let mut parth = [_mm256_setzero_si256(); R];
            let plane = if high_bits > 0 {
                _mm256_loadu_si256(q.add(plane_at + 32 * h) as *const __m256i)
            } else {
                _mm256_setzero_si256()
            };
            for c in 0..chunks {
                let raw = if NIB {
                    let v = c % (chunks / 2);
                    let raw = _mm256_loadu_si256(q.add(64 * v + 32 * h) as *const __m256i);
                    let nib = if c < chunks / 2 {
                        _mm256_and_si256(raw, low)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16(raw, 4), low)
                    };
                    if high_bits > 0 {
                        // This chunk's plane bits moved to bits 4.. of each byte (16-bit
                        // shifts by at most 4 bring no bit of the other byte there).
                        let s = 4 - (high_bits * c) as i32;
                        let moved = if s >= 0 {
                            _mm256_sll_epi16(plane, _mm_cvtsi32_si128(s))
                        } else {
                            _mm256_srl_epi16(plane, _mm_cvtsi32_si128(-s))
                        };
                        _mm256_or_si256(nib, _mm256_and_si256(moved, hmask))
                    } else {
                        nib
                    }
                } else {
                    _mm256_loadu_si256(q.add(64 * c + 32 * h) as *const __m256i)
                };
                // `w`: unsigned quants (|w| for SIGNED, whose signs stay in `raw` for
                // vpsignb; the low nibbles for WIDE, whose high ones are `wh`).
                let (w, wh) = if WIDE {
                    (
                        _mm256_and_si256(raw, low),
                        _mm256_and_si256(_mm256_srli_epi16(raw, 4), low),
                    )
                } else if SIGNED {
                    (_mm256_abs_epi8(raw), raw)
                } else {
                    (raw, raw)
                };
                for k in 0..R {
                    let xc = _mm256_set1_epi32(x[k].add(c).read_unaligned());
                    if WIDE {
                        // Two 4-bit planes, each summed in 16 bits for the whole block.
                        part[k] = _mm256_add_epi16(part[k], _mm256_maddubs_epi16(w, xc));
                        parth[k] = _mm256_add_epi16(parth[k], _mm256_maddubs_epi16(wh, xc));
                        if c + 1 == chunks {
                            isum[k] = _mm256_add_epi32(
                                _mm256_madd_epi16(part[k], ones),
                                _mm256_madd_epi16(parth[k], sixteen),
                            );
                        }
                        continue;
                    }
                    let pairs = if SIGNED {
                        _mm256_maddubs_epi16(w, _mm256_sign_epi8(xc, wh))
                    } else {
                        _mm256_maddubs_epi16(w, xc)
                    };
                    if run == 1 {
                        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(pairs, ones));
                        continue;
                    }
                    part[k] = _mm256_add_epi16(part[k], pairs);
                    if (c + 1) % run == 0 || c + 1 == chunks {
                        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(part[k], ones));
                        part[k] = _mm256_setzero_si256();
                    }
                }
            }
            let dw = lanes256(dp, p.half, h);
            let mw = match p.m_of_d {
                Some(k) => _mm256_mul_ps(dw, _mm256_set1_ps(k)),
                None => lanes256(mp, p.half, h),
            };
            for (k, acc) in acc.iter_mut().enumerate() {
                let row = i0 + k;
                let da = _mm256_set1_ps(*a.d.get_unchecked((row * cols + b * BK) / 32));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[k]), _mm256_mul_ps(dw, da), *acc);
                if !SIGNED {
                    let s = _mm256_set1_ps(*sums.get_unchecked(row * nb + b));
                    *acc = _mm256_fmadd_ps(mw, s, *acc);
                }
            }
        }
        acc
    }
}

#[inline(always)]
unsafe fn run256<
    const NIB: bool,
    const BK: usize,
    const WIDE: bool,
    const SIGNED: bool,
    const BITS: u32,
>(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY (whole body): as in `run512`.
    unsafe {
        let mut lanes = [0f32; GROUP];
        // Groups before `full` have all 16 rows: their lanes go straight to `y`.
        let full = p.rows() / GROUP;
        let mut put = |g: usize, i: usize, lo: __m256, hi: __m256| {
            if g < full {
                let o = y.add(i * stride + g * GROUP);
                _mm256_storeu_ps(o, lo);
                _mm256_storeu_ps(o.add(8), hi);
                return;
            }
            _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
            p.store(g, i, &lanes, y, stride);
        };
        macro_rules! tile {
            ($r:literal, $g:expr, $i:expr) => {{
                let lo = tile256::<NIB, BK, WIDE, SIGNED, BITS, $r>(p, a, $g, 0, $i);
                let hi = tile256::<NIB, BK, WIDE, SIGNED, BITS, $r>(p, a, $g, 1, $i);
                for k in 0..$r {
                    put($g, $i + k, lo[k], hi[k]);
                }
            }};
        }
        let end = part.rows.end;
        for g in part.groups.clone() {
            let mut i = part.rows.start;
            while i + ROWS256 <= end {
                tile!(6, g, i);
                i += ROWS256;
            }
            // The rest in one narrower tile (each row's sums are the same in any tile).
            match end - i {
                0 => {}
                1 => tile!(1, g, i),
                2 => tile!(2, g, i),
                3 => tile!(3, g, i),
                4 => tile!(4, g, i),
                _ => tile!(5, g, i),
            }
        }
    }
}

/// The AVX2 kernel for one part of a matmul.
///
/// # Safety
/// As `groups_avx512`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn packed_groups(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY: forwarded.
    unsafe {
        match (p.nibbles, p.bk, p.wide, p.signed, p.bits) {
            (true, 32, _, _, 4) => run256::<true, 32, false, false, 4>(p, a, part, y, stride),
            (true, 32, _, _, 5) => run256::<true, 32, false, false, 5>(p, a, part, y, stride),
            (true, 16, _, _, 6) => run256::<true, 16, false, false, 6>(p, a, part, y, stride),
            (false, 32, false, true, _) => {
                run256::<false, 32, false, true, 8>(p, a, part, y, stride)
            }
            (false, 32, false, false, 5) => {
                run256::<false, 32, false, false, 5>(p, a, part, y, stride)
            }
            (false, 32, false, false, _) => {
                run256::<false, 32, false, false, 6>(p, a, part, y, stride)
            }
            (false, 32, true, _, _) => run256::<false, 32, true, false, 8>(p, a, part, y, stride),
            (false, 16, _, _, _) => run256::<false, 16, false, false, 6>(p, a, part, y, stride),
            other => unreachable!("layout {other:?}"),
        }
    }
}

/// Attention: 16 positions' scores at a time for up to 4 heads (one f16 key row load feeds
/// every head of the group), soft-cap and softmax over the window, then the values in
/// 16-wide column strips. The sums run in the order of `attention::attend_body`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attend(a: &Attn, scores: &mut Vec<f32>, out: &mut [f32]) {
    const H: usize = 4;
    let hd = a.hd;
    let g = a.q.len() / hd;
    let (start, end) = (a.start, a.values.len() / hd);
    if !hd.is_multiple_of(8) {
        return crate::attention::attend_body(a, scores, out, f32::mul_add);
    }
    assert!(
        start < end
            && end <= a.stride
            && a.stride.is_multiple_of(8)
            && a.keys_t.len() >= hd * a.stride
            && out.len() == g * hd,
        "attention shapes"
    );
    // Score columns cover positions p0..p1: 8-aligned, inside the key rows.
    let (p0, p1) = (start / 8 * 8, end.next_multiple_of(8));
    let lp = p1 - p0;
    let (s0, len) = (start - p0, end - start);
    scores.clear();
    scores.resize(g.next_multiple_of(H) * lp, 0.0);
    let kp = a.keys_t.as_ptr() as *const u16;
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
        // Scores over 16 positions at a time (two key vectors per broadcast query: 8
        // independent FMA chains, where 4 would wait on the FMA latency), the last 8
        // alone when the range is not a multiple of 16. Each score is still one FMA
        // chain over d, so the numbers do not depend on the pairing.
        let mut p = p0;
        while p < p1 {
            let two = p + 16 <= p1;
            // SAFETY: p + 8 (p + 16 when `two`) <= p1 <= stride, so the 8 keys of every
            // dimension d < hd at p (and at p + 8 when `two`) are inside `keys_t`; `qs`
            // has hd * H values; `scores` has H * lp room from row h0, and these stores
            // end at p - p0 + 16 <= lp (p - p0 + 8 when not `two`).
            unsafe {
                if h0 == 0 {
                    // Ask for the values of these positions now: the weighted sum reads
                    // them after all the scores, and a decode step finds them in memory,
                    // not in cache (the weights streamed through since the last step).
                    let step = if two { 16 } else { 8 };
                    prefetch_values(vp, p.max(start) * hd, (p + step).min(end) * hd);
                }
                let mut acc = [[_mm256_setzero_ps(); 2]; H];
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
                    let qd = qs.as_ptr().add(d * H);
                    for (h, acc) in acc.iter_mut().enumerate() {
                        let w = _mm256_broadcast_ss(&*qd.add(h));
                        acc[0] = _mm256_fmadd_ps(w, k0, acc[0]);
                        acc[1] = _mm256_fmadd_ps(w, k1, acc[1]);
                    }
                }
                for (h, acc) in acc.iter().enumerate() {
                    let o = scores.as_mut_ptr().add((h0 + h) * lp + p - p0);
                    _mm256_storeu_ps(o, acc[0]);
                    if two {
                        _mm256_storeu_ps(o.add(8), acc[1]);
                    }
                }
            }
            p += if two { 16 } else { 8 };
        }
        let mut inv = [0f32; H];
        for (h, inv) in inv.iter_mut().enumerate().take(gh) {
            let s = &mut scores[(h0 + h) * lp + s0..(h0 + h) * lp + s0 + len];
            if let Some(cap) = a.softcap {
                for x in s.iter_mut() {
                    *x = cap * (*x / cap).tanh();
                }
            }
            *inv = crate::attention::softmax_unnormalised(s);
        }
        for c0 in (0..hd).step_by(16) {
            let strips = ((hd - c0) / 8).min(2);
            // SAFETY: every value row start <= p < end has hd halves; columns c0 + 8i < hd.
            unsafe {
                let mut acc = [[_mm256_setzero_ps(); 2]; H];
                for p in start..end {
                    let mut v = [_mm256_setzero_ps(); 2];
                    for (i, v) in v.iter_mut().enumerate().take(strips) {
                        *v = _mm256_cvtph_ps(_mm_loadu_si128(
                            vp.add(p * hd + c0 + 8 * i) as *const __m128i
                        ));
                    }
                    for (h, acc) in acc.iter_mut().enumerate() {
                        let w = _mm256_set1_ps(*scores.get_unchecked((h0 + h) * lp + p - p0));
                        for i in 0..2 {
                            acc[i] = _mm256_fmadd_ps(w, v[i], acc[i]);
                        }
                    }
                }
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

/// `g = silu(g) * u`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    crate::activation::silu_body(gate, up)
}

/// `g = gelu(g) * u` (tanh approximation).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    crate::activation::gelu_body(gate, up)
}

/// `a · b`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    crate::simd::dot_body(a, b, f32::mul_add)
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
    crate::softmax::max_body(values)
}

/// Temperature weights and their total (see `softmax::exp_weights`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn weights_body(logits: &[f32], max: f32, t: f32, w: &mut [f32]) -> f64 {
    crate::softmax::weights_body(logits, max, t, w)
}

/// The softmax normaliser (see `softmax::exp_sum`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn exp_sum_body(logits: &[f32], max: f32) -> f32 {
    crate::softmax::exp_sum_body(logits, max)
}

/// Bin indices of logits (see `softmax::bin_indices`).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn bins_body(logits: &[f32], max: f32, scale: f32, last: u16, bins: &mut [u16]) {
    crate::softmax::bins_body(logits, max, scale, last, bins)
}
