//! AVX-512 and AVX2 kernels for `PackedMatrix`: each 32-weight block is expanded to f32 in
//! registers (`q * d + m`) and multiplied against up to `ROWS` activation rows.
//!
//! Each output is accumulated lane-wise block after block and reduced by a fixed tree, in
//! the same order whatever the batch size.

use std::arch::x86_64::*;

use super::packed::{BLOCK, PackedMatrix, ROWS, rows_kernel};

/// Expands block `i` into two 16-lane vectors.
#[inline(always)]
unsafe fn expand512(p: &PackedMatrix, i: usize) -> (__m512, __m512) {
    let (d, m, q) = p.block(i);
    // SAFETY (whole body): `q` holds 16 (nibbles) or 32 (bytes) readable bytes, and the
    // caller enabled avx512f.
    unsafe {
        let (vd, vm) = (_mm512_set1_ps(d), _mm512_set1_ps(m));
        let (a, b) = if p.nibbles() {
            let raw = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.as_ptr() as *const __m128i));
            let lo = _mm512_and_si512(raw, _mm512_set1_epi32(0x0F));
            let hi = _mm512_srli_epi32(raw, 4);
            (lo, hi)
        } else {
            let lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(q.as_ptr() as *const __m128i));
            let hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(q.as_ptr().add(16) as *const __m128i));
            (lo, hi)
        };
        (
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), vd, vm),
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(b), vd, vm),
        )
    }
}

/// `R` activation rows from `i0` against weight row `r`. Each row keeps four independent
/// accumulators (even/odd block x low/high half) so that even one row is not bound by
/// the latency of a single FMA chain.
#[inline(always)]
unsafe fn dot_rows512<const R: usize>(
    p: &PackedMatrix,
    x: &[f32],
    i0: usize,
    r: usize,
) -> [f32; R] {
    let nb = p.blocks_per_row();
    let cols = p.cols();
    // SAFETY (whole body): rows i0..i0+R of `x` exist (checked by `matmul_rows_at`), so
    // every 32-float load below is in bounds; avx512f is enabled by the caller.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        let xp = x.as_ptr();
        // Blocks go in pairs so that every accumulator index is a constant and the
        // accumulators stay in registers.
        let mut b = 0;
        while b + 2 <= nb {
            let (w0, w1) = expand512(p, r * nb + b);
            let (w2, w3) = expand512(p, r * nb + b + 1);
            for (k, a) in acc.iter_mut().enumerate() {
                let xk = xp.add((i0 + k) * cols + b * BLOCK);
                a[0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xk), a[0]);
                a[1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xk.add(16)), a[1]);
                a[2] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(xk.add(32)), a[2]);
                a[3] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(xk.add(48)), a[3]);
            }
            b += 2;
        }
        if b < nb {
            let (w0, w1) = expand512(p, r * nb + b);
            for (k, a) in acc.iter_mut().enumerate() {
                let xk = xp.add((i0 + k) * cols + b * BLOCK);
                a[0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xk), a[0]);
                a[1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xk.add(16)), a[1]);
            }
        }
        let mut out = [0f32; R];
        for k in 0..R {
            let a = &acc[k];
            let s = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
            out[k] = _mm512_reduce_add_ps(s);
        }
        out
    }
}

/// Expands block `i` into four 8-lane vectors.
#[inline(always)]
unsafe fn expand256(p: &PackedMatrix, i: usize) -> [__m256; 4] {
    let (d, m, q) = p.block(i);
    // SAFETY (whole body): as in `expand512`, with avx2 and fma enabled by the caller.
    unsafe {
        let (vd, vm) = (_mm256_set1_ps(d), _mm256_set1_ps(m));
        let parts: [__m256i; 4] = if p.nibbles() {
            let raw = _mm_loadu_si128(q.as_ptr() as *const __m128i);
            let lo = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
            let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F));
            [
                _mm256_cvtepu8_epi32(lo),
                _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)),
                _mm256_cvtepu8_epi32(hi),
                _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)),
            ]
        } else {
            let a = _mm_loadu_si128(q.as_ptr() as *const __m128i);
            let b = _mm_loadu_si128(q.as_ptr().add(16) as *const __m128i);
            [
                _mm256_cvtepi8_epi32(a),
                _mm256_cvtepi8_epi32(_mm_srli_si128(a, 8)),
                _mm256_cvtepi8_epi32(b),
                _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)),
            ]
        };
        parts.map(|v| _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), vd, vm))
    }
}

#[inline(always)]
unsafe fn hsum256(v: __m256) -> f32 {
    // SAFETY: avx enabled by the caller.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

/// As `dot_rows512` with 8-lane vectors: four accumulators per row, one per quarter block.
#[inline(always)]
unsafe fn dot_rows256<const R: usize>(
    p: &PackedMatrix,
    x: &[f32],
    i0: usize,
    r: usize,
) -> [f32; R] {
    let nb = p.blocks_per_row();
    let cols = p.cols();
    // SAFETY (whole body): as in `dot_rows512`.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 4]; R];
        let xp = x.as_ptr();
        for b in 0..nb {
            let w = expand256(p, r * nb + b);
            for (k, a) in acc.iter_mut().enumerate() {
                let xk = xp.add((i0 + k) * cols + b * BLOCK);
                a[0] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xk), a[0]);
                a[1] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xk.add(8)), a[1]);
                a[2] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xk.add(16)), a[2]);
                a[3] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xk.add(24)), a[3]);
            }
        }
        let mut out = [0f32; R];
        for k in 0..R {
            let a = &acc[k];
            out[k] = hsum256(_mm256_add_ps(
                _mm256_add_ps(a[0], a[1]),
                _mm256_add_ps(a[2], a[3]),
            ));
        }
        out
    }
}

rows_kernel!(
    #[target_feature(enable = "avx512f,fma")]
    rows_avx512,
    dot_rows512
);
rows_kernel!(
    #[target_feature(enable = "avx2,fma")]
    rows_avx2,
    dot_rows256
);
