//! Every AVX2 kernel (AVX2 with FMA and F16C): the integer matmul of `PackedMatrix`, and
//! the plain-loop definitions of the other kernels compiled with these features enabled.
//! `unsafe` only because of the CPU features, which `Simd::current` checks once.

use std::arch::x86_64::*;

use crate::acts::{Out, QuantActs};
use crate::attention::Attn;
use crate::packed::{GROUP, PackedMatrix};

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

/// `Σ u·x` over 4-byte groups of 8 rows: u8 quants (at most 63 unless `WIDE`) times s8.
#[inline(always)]
unsafe fn madd256<const WIDE: bool>(w: __m256i, x: __m256i) -> __m256i {
    // SAFETY: avx2 enabled by the caller.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        if WIDE {
            let low = _mm256_set1_epi8(0x0F);
            let lo = _mm256_and_si256(w, low);
            let hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low);
            _mm256_add_epi32(
                _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x), ones),
                _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x), _mm256_set1_epi16(16)),
            )
        } else {
            _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones)
        }
    }
}

#[inline(always)]
unsafe fn tile256<const NIB: bool, const BK: usize, const WIDE: bool>(
    p: &PackedMatrix,
    a: &QuantActs,
    g: usize,
    row: usize,
) -> [__m256; 2] {
    let chunks = BK / 4;
    let nb = p.blocks();
    let cols = a.cols;
    let sums = a.sums(BK);
    // SAFETY (whole body): as in `tile512`.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); 2];
        let low = _mm256_set1_epi8(0x0F);
        for b in 0..nb {
            let q = p.quants(g, b);
            let x = a.q.as_ptr().add(row * cols + b * BK) as *const i32;
            let (dp, mp) = p.scales(g, b);
            let da = _mm256_set1_ps(*a.d.get_unchecked((row * cols + b * BK) / 32));
            let s = _mm256_set1_ps(*sums.get_unchecked(row * nb + b));
            for (h, acc) in acc.iter_mut().enumerate() {
                let mut isum = _mm256_setzero_si256();
                for c in 0..chunks {
                    let xc = _mm256_set1_epi32(x.add(c).read_unaligned());
                    let wc = if NIB {
                        let v = c % (chunks / 2);
                        let raw = _mm256_loadu_si256(q.add(64 * v + 32 * h) as *const __m256i);
                        if c < chunks / 2 {
                            _mm256_and_si256(raw, low)
                        } else {
                            _mm256_and_si256(_mm256_srli_epi16(raw, 4), low)
                        }
                    } else {
                        _mm256_loadu_si256(q.add(64 * c + 32 * h) as *const __m256i)
                    };
                    isum = _mm256_add_epi32(isum, madd256::<WIDE>(wc, xc));
                }
                let dw = lanes256(dp, p.half, h);
                let mw = lanes256(mp, p.half, h);
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, da), *acc);
                *acc = _mm256_fmadd_ps(mw, s, *acc);
            }
        }
        acc
    }
}

#[inline(always)]
unsafe fn run256<const NIB: bool, const BK: usize, const WIDE: bool>(
    p: &PackedMatrix,
    a: &QuantActs,
    g0: usize,
    g1: usize,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY (whole body): as in `run512`.
    unsafe {
        let mut lanes = [0f32; GROUP];
        for g in g0..g1 {
            for i in 0..a.n {
                let acc = tile256::<NIB, BK, WIDE>(p, a, g, i);
                _mm256_storeu_ps(lanes.as_mut_ptr(), acc[0]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), acc[1]);
                p.store(g, i, &lanes, y, stride);
            }
        }
    }
}

/// The AVX2 kernel for groups `g0..g1`.
///
/// # Safety
/// As `groups_avx512`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn packed_groups(
    p: &PackedMatrix,
    a: &QuantActs,
    g0: usize,
    g1: usize,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY: forwarded.
    unsafe {
        match (p.nibbles, p.bk, p.wide) {
            (true, 32, _) => run256::<true, 32, false>(p, a, g0, g1, y, stride),
            (false, 32, false) => run256::<false, 32, false>(p, a, g0, g1, y, stride),
            (false, 32, true) => run256::<false, 32, true>(p, a, g0, g1, y, stride),
            (false, 16, _) => run256::<false, 16, false>(p, a, g0, g1, y, stride),
            other => unreachable!("layout {other:?}"),
        }
    }
}

/// Activation quantisation (the plain loops, vectorised by the compiler).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn quantise(a: &mut Out, x: &[f32]) {
    crate::acts::quantise(a, x)
}

/// Attention (the plain loops, with fused multiply-adds).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn attend(a: &Attn, s: &mut Vec<f32>, out: &mut [f32]) {
    crate::attention::attend_body(a, s, out, f32::mul_add)
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
