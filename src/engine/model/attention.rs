//! Attention of one GQA group over a slot's live positions in the KV slab (f16 keys,
//! transposed, and f16 values): no masks, no concatenation, nothing past `len` is used.

use half::f16;

use super::kernels::Simd;

/// The inputs of `attend_group`.
pub struct Attn<'a> {
    /// The group's query heads, `g x hd`.
    pub q: &'a [f32],
    /// Head dimension.
    pub hd: usize,
    /// Transposed keys: `hd` rows of `stride` positions (a multiple of 16).
    pub keys_t: &'a [f16],
    /// Row length of `keys_t`.
    pub stride: usize,
    /// Values of positions `0..len`, `len x hd`.
    pub values: &'a [f16],
    /// Score scale (1/sqrt(hd)).
    pub scale: f32,
}

/// Softmax of the scaled scores `q · k` over positions `0..len`, then the weighted sum of
/// the values, into `out` (`g x hd`). `scores` is scratch.
pub fn attend_group(a: &Attn, scores: &mut Vec<f32>, out: &mut [f32]) {
    match Simd::current() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports;
        // the shapes are checked inside.
        Simd::Avx512 if a.hd.is_multiple_of(16) => unsafe { attend_avx512(a, scores, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 | Simd::Avx512 => unsafe { attend_avx2(a, scores, out) },
        _ => attend_body(a, scores, out, |x, y, acc| x * y + acc),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(a: &Attn, s: &mut Vec<f32>, out: &mut [f32]) {
    attend_body(a, s, out, f32::mul_add)
}

/// Softmax in place over `s`; returns 1 / the sum of the exponentials.
#[inline(always)]
fn softmax_unnormalised(s: &mut [f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    for c in s.chunks(16) {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l = l.max(*x);
        }
    }
    let max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sums = [0f32; 16];
    for c in s.chunks_mut(16) {
        for (l, x) in sums.iter_mut().zip(c) {
            *x = exp_fast(*x - max);
            *l += *x;
        }
    }
    1.0 / sums.iter().sum::<f32>()
}

/// Plain loops: the definition the AVX-512 path follows.
#[inline(always)]
fn attend_body(
    a: &Attn,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let hd = a.hd;
    let g = a.q.len() / hd;
    let len = a.values.len() / hd;
    scores.clear();
    scores.resize(g * len, 0.0);
    // Closures would be compiled without the caller's target features: plain loops.
    for d in 0..hd {
        let krow = &a.keys_t[d * a.stride..d * a.stride + len];
        for h in 0..g {
            let qd = a.q[h * hd + d] * a.scale;
            let s = &mut scores[h * len..(h + 1) * len];
            for (si, k) in s.iter_mut().zip(krow) {
                *si = fma(qd, k.to_f32_const(), *si);
            }
        }
    }
    out.fill(0.0);
    for h in 0..g {
        let s = &mut scores[h * len..(h + 1) * len];
        let inv = softmax_unnormalised(s);
        let o = &mut out[h * hd..(h + 1) * hd];
        for (p, v) in s.iter().zip(a.values.chunks_exact(hd)) {
            for (oi, vi) in o.iter_mut().zip(v) {
                *oi = fma(*p, vi.to_f32_const(), *oi);
            }
        }
        for oi in o.iter_mut() {
            *oi *= inv;
        }
    }
}

/// AVX-512: 16 positions' scores at a time for up to 4 heads (one f16 key row load feeds
/// every head of the group), then the values in 64-wide column strips.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,fma,f16c")]
unsafe fn attend_avx512(a: &Attn, scores: &mut Vec<f32>, out: &mut [f32]) {
    use std::arch::x86_64::*;
    const H: usize = 4;
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
    for h0 in (0..g).step_by(H) {
        let gh = (g - h0).min(H);
        let qd = |h: usize, d: usize| {
            if h < gh {
                a.q[(h0 + h) * hd + d] * a.scale
            } else {
                0.0
            }
        };
        let mut p = 0;
        while p < len {
            // SAFETY: p + 16 <= stride (both multiples of 16, p < len <= stride), so the
            // 16 keys of every row d < hd are inside `keys_t`; scores has H * lp room.
            unsafe {
                let mut acc = [_mm512_setzero_ps(); H];
                for d in 0..hd {
                    let k = _mm512_cvtph_ps(_mm256_loadu_si256(
                        kp.add(d * a.stride + p) as *const __m256i
                    ));
                    for (h, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(_mm512_set1_ps(qd(h, d)), k, *acc);
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

/// `e^x` (Cephes' expf: range reduction by ln 2 and a degree-6 polynomial, within a few
/// ulp), written so that it vectorises; `x` is clamped to [-87, 88].
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

#[cfg(test)]
mod tests {
    use super::super::kernels::noise;
    use super::*;

    #[test]
    fn exp_fast_is_within_a_few_ulp() {
        for i in -87_000..=88_000 {
            let x = i as f32 / 1000.0;
            let (got, want) = (exp_fast(x), x.exp());
            assert!(
                (got - want).abs() <= 4.0 * f32::EPSILON * want,
                "exp({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn attention_matches_f64_softmax_on_every_level() {
        let halves = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
        for (hd, g, len) in [
            (64usize, 3usize, 37usize),
            (64, 5, 16),
            (128, 1, 3),
            (48, 2, 20),
        ] {
            let stride = len.next_multiple_of(16) + 16;
            let q = noise(g * hd, 11);
            let keys_t = halves(noise(hd * stride, 12));
            let values = halves(noise(len * hd, 13));
            let scale = 0.125;
            let mut want = vec![0f64; g * hd];
            for h in 0..g {
                let s: Vec<f64> = (0..len)
                    .map(|p| {
                        (0..hd)
                            .map(|d| q[h * hd + d] as f64 * keys_t[d * stride + p].to_f64())
                            .sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for p in 0..len {
                    for d in 0..hd {
                        want[h * hd + d] += e[p] / sum * values[p * hd + d].to_f64();
                    }
                }
            }
            let a = Attn {
                q: &q,
                hd,
                keys_t: &keys_t,
                stride,
                values: &values,
                scale,
            };
            let mut scratch = Vec::new();
            for level in [Simd::Portable, Simd::Avx2, Simd::Avx512] {
                if level as u8 > Simd::detected() as u8 {
                    continue;
                }
                let mut out = vec![f32::NAN; g * hd];
                match level {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the level is available (checked above).
                    Simd::Avx512 if hd % 16 == 0 => unsafe {
                        attend_avx512(&a, &mut scratch, &mut out)
                    },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above.
                    Simd::Avx2 | Simd::Avx512 => unsafe { attend_avx2(&a, &mut scratch, &mut out) },
                    _ => attend_body(&a, &mut scratch, &mut out, |x, y, acc| x * y + acc),
                }
                for (a, b) in out.iter().zip(&want) {
                    assert!(
                        (*a as f64 - b).abs() < 1e-6,
                        "{level:?} hd={hd} g={g}: {a} vs {b}"
                    );
                }
            }
        }
    }
}
