//! AVX-512 VNNI and AVX2 kernels for `PackedMatrix` (see `packed.rs` for the layout).
//!
//! AVX-512: a block's chunks are unpacked once into up to 8 registers and multiplied
//! against `ROWS` activation rows with `vpdpbusd` (u8 x s8 -> 4 products per i32 lane).
//! AVX2: the same chunks in two 8-row halves with `vpmaddubsw` + `vpmaddwd`; quants above
//! 63 are split into nibbles first so that the 16-bit pair sums cannot saturate.

use std::arch::x86_64::*;

use super::acts::QuantActs;
use super::packed::{GROUP, PackedMatrix, ROWS};

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
        for b in 0..nb {
            let q = p.quants(g, b);
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
            for (k, acc) in acc.iter_mut().enumerate() {
                let row = i0 + k;
                let x = xq.add(row * cols + b * BK) as *const i32;
                let mut s0 = _mm512_setzero_si512();
                let mut s1 = _mm512_setzero_si512();
                let mut c = 0;
                while c < chunks {
                    s0 =
                        _mm512_dpbusd_epi32(s0, w[c], _mm512_set1_epi32(x.add(c).read_unaligned()));
                    s1 = _mm512_dpbusd_epi32(
                        s1,
                        w[c + 1],
                        _mm512_set1_epi32(x.add(c + 1).read_unaligned()),
                    );
                    c += 2;
                }
                let isum = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
                let da = *a.d.get_unchecked((row * cols + b * BK) / 32);
                let s = *sums.get_unchecked(row * nb + b);
                *acc = _mm512_fmadd_ps(isum, _mm512_mul_ps(dw, _mm512_set1_ps(da)), *acc);
                *acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(s), *acc);
            }
        }
        acc
    }
}

#[inline(always)]
unsafe fn run512<const NIB: bool, const BK: usize>(
    p: &PackedMatrix,
    a: &QuantActs,
    g0: usize,
    g1: usize,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY (whole body): as in `tile512`; `store` writes inside the caller's range.
    unsafe {
        let mut lanes = [0f32; GROUP];
        for g in g0..g1 {
            let mut i = 0;
            while i + ROWS <= a.n {
                let acc = tile512::<NIB, BK, ROWS>(p, a, g, i);
                for (k, v) in acc.iter().enumerate() {
                    _mm512_storeu_ps(lanes.as_mut_ptr(), *v);
                    p.store(g, i + k, &lanes, y, stride);
                }
                i += ROWS;
            }
            while i < a.n {
                let acc = tile512::<NIB, BK, 1>(p, a, g, i);
                _mm512_storeu_ps(lanes.as_mut_ptr(), acc[0]);
                p.store(g, i, &lanes, y, stride);
                i += 1;
            }
        }
    }
}

/// The AVX-512 VNNI kernel for groups `g0..g1`.
///
/// # Safety
/// The CPU has the enabled features; shapes checked and `y` exclusive as in
/// `PackedMatrix::matmul_groups_at`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
pub(super) unsafe fn groups_avx512(
    p: &PackedMatrix,
    a: &QuantActs,
    g0: usize,
    g1: usize,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY: forwarded.
    unsafe {
        match (p.nibbles, p.bk) {
            (true, 32) => run512::<true, 32>(p, a, g0, g1, y, stride),
            (false, 32) => run512::<false, 32>(p, a, g0, g1, y, stride),
            (false, 16) => run512::<false, 16>(p, a, g0, g1, y, stride),
            other => unreachable!("layout {other:?}"),
        }
    }
}

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
pub(super) unsafe fn groups_avx2(
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
