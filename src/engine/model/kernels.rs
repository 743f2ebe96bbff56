//! f32 dot-product kernels with run-time CPU feature dispatch.
//!
//! The bodies are written once and compiled three times: with AVX-512, with AVX2+FMA and
//! for the baseline target. `SLUICE_KERNEL=portable|avx2|avx512` forces a path (tests use
//! it to cover the fallback); an unsupported choice falls back to what the CPU has.

use std::sync::OnceLock;

/// The instruction-set level a kernel runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Simd {
    /// Baseline code for any x86-64 or other CPU.
    Portable,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX-512F, BW and VNNI (with AVX2, FMA and F16C).
    Avx512,
}

impl Simd {
    /// The best level this CPU supports.
    pub fn detected() -> Simd {
        #[cfg(target_arch = "x86_64")]
        {
            use std::is_x86_feature_detected as has;
            let avx2 = has!("avx2") && has!("fma") && has!("f16c");
            if avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512vnni") {
                return Simd::Avx512;
            }
            if avx2 {
                return Simd::Avx2;
            }
        }
        Simd::Portable
    }

    /// The level in force: `SLUICE_KERNEL` if set and supported, else the detected one.
    pub fn current() -> Simd {
        static LEVEL: OnceLock<Simd> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            let best = Simd::detected();
            let wanted = match std::env::var("SLUICE_KERNEL").as_deref() {
                Ok("portable") => Simd::Portable,
                Ok("avx2") => Simd::Avx2,
                Ok("avx512") => Simd::Avx512,
                _ => best,
            };
            // Never pick a level above what the CPU has.
            let rank = |s: Simd| s as u8;
            if rank(wanted) <= rank(best) {
                wanted
            } else {
                best
            }
        })
    }
}

/// `a · b` at the current level. The slices must have the same length.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_at(Simd::current(), a, b)
}

/// `a · b` at a given level (tests compare the levels with each other).
pub fn dot_at(level: Simd, a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports.
        Simd::Avx512 => unsafe { dot_avx512(a, b) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 => unsafe { dot_avx2(a, b) },
        _ => dot_body(a, b, |x, y, acc| x * y + acc),
    }
}

/// `y[i] += alpha * x[i]` at the current level.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    match Simd::current() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports.
        Simd::Avx512 => unsafe { axpy_avx512(alpha, x, y) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 => unsafe { axpy_avx2(alpha, x, y) },
        _ => axpy_body(alpha, x, y, |a, x, y| a * x + y),
    }
}

/// Attention of one GQA group over positions `0..len`: `q` holds the group's query heads
/// (`g x head_dim`), which share the transposed keys `keys_t` (`head_dim` rows of `stride`
/// positions) and the `values` (`len x head_dim`). Softmax of the scaled scores, then the
/// weighted sum of the values, into `out` (`g x head_dim`). `scores` is scratch.
#[allow(clippy::too_many_arguments)]
pub fn attend_group(
    q: &[f32],
    head_dim: usize,
    keys_t: &[f32],
    stride: usize,
    values: &[f32],
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let args = Attn {
        q,
        hd: head_dim,
        keys_t,
        stride,
        values,
        scale,
    };
    match Simd::current() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports.
        Simd::Avx512 => unsafe { attend_avx512(&args, scores, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 => unsafe { attend_avx2(&args, scores, out) },
        _ => attend_body(&args, scores, out, |x, y, acc| x * y + acc),
    }
}

/// The inputs of `attend_group`.
struct Attn<'a> {
    q: &'a [f32],
    hd: usize,
    keys_t: &'a [f32],
    stride: usize,
    values: &'a [f32],
    scale: f32,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn attend_avx512(a: &Attn, s: &mut Vec<f32>, out: &mut [f32]) {
    attend_body(a, s, out, f32::mul_add)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(a: &Attn, s: &mut Vec<f32>, out: &mut [f32]) {
    attend_body(a, s, out, f32::mul_add)
}

/// Plain loops written to vectorise along positions (scores) and along the head
/// dimension (values); no horizontal reductions but the softmax's max and sum.
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
    // Closures would be compiled without the caller's target features, so these are
    // plain loops.
    for d in 0..hd {
        let krow = &a.keys_t[d * a.stride..d * a.stride + len];
        for h in 0..g {
            let qd = a.q[h * hd + d] * a.scale;
            let s = &mut scores[h * len..(h + 1) * len];
            for (si, k) in s.iter_mut().zip(krow) {
                *si = fma(qd, *k, *si);
            }
        }
    }
    out.fill(0.0);
    for h in 0..g {
        let s = &mut scores[h * len..(h + 1) * len];
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
                *x = exp_neg(*x - max);
                *l += *x;
            }
        }
        let inv = 1.0 / sums.iter().sum::<f32>();
        let o = &mut out[h * hd..(h + 1) * hd];
        for (p, v) in s.iter().zip(a.values.chunks_exact(hd)) {
            axpy_body(p * inv, v, o, fma);
        }
    }
}

/// `e^x` for `x <= 0` (Cephes' expf: range reduction by ln 2 and a degree-6 polynomial,
/// within 2 ulp), written so that it vectorises; below -87 it flushes to about 0.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 5.000_000_1e-1;
    let y = p * z + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b, f32::mul_add)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b, f32::mul_add)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn axpy_avx512(alpha: f32, x: &[f32], y: &mut [f32]) {
    axpy_body(alpha, x, y, f32::mul_add)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(alpha: f32, x: &[f32], y: &mut [f32]) {
    axpy_body(alpha, x, y, f32::mul_add)
}

/// Lane-wise accumulation into 32 independent sums, so the compiler can keep them in
/// vector registers without reassociating floating-point adds.
#[inline(always)]
fn dot_body(a: &[f32], b: &[f32], fma: impl Fn(f32, f32, f32) -> f32) -> f32 {
    const W: usize = 32;
    let mut acc = [0f32; W];
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut ca = a.chunks_exact(W);
    let mut cb = b.chunks_exact(W);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for j in 0..W {
            acc[j] = fma(x[j], y[j], acc[j]);
        }
    }
    let mut tail = 0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail = fma(*x, *y, tail);
    }
    let mut half = [0f32; 16];
    for j in 0..16 {
        half[j] = acc[j] + acc[j + 16];
    }
    half.iter().sum::<f32>() + tail
}

#[inline(always)]
fn axpy_body(alpha: f32, x: &[f32], y: &mut [f32], fma: impl Fn(f32, f32, f32) -> f32) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi = fma(alpha, *xi, *yi);
    }
}

/// Deterministic test data in [-0.5, 0.5) (an LCG), shared by the kernel tests.
#[cfg(test)]
pub(crate) fn noise(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_matches_f64_reference() {
        for n in [1, 7, 31, 32, 33, 576, 1536, 1000] {
            let (a, b) = (noise(n, 1), noise(n, 2));
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            for level in [Simd::Portable, Simd::Avx2, Simd::Avx512] {
                if level as u8 > Simd::detected() as u8 {
                    continue;
                }
                let got = dot_at(level, &a, &b) as f64;
                assert!(
                    (got - exact).abs() < 1e-4,
                    "{level:?} n={n}: {got} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn exp_neg_is_within_a_few_ulp() {
        for i in 0..=87_000 {
            let x = -(i as f32) / 1000.0;
            let (got, want) = (exp_neg(x), x.exp());
            assert!(
                (got - want).abs() <= 4.0 * f32::EPSILON * want,
                "exp({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn attention_matches_f64_softmax_on_every_level() {
        let (hd, g, len, stride) = (64, 3, 37, 40);
        let q = noise(g * hd, 11);
        let keys_t = noise(hd * stride, 12);
        let values = noise(len * hd, 13);
        let scale = 0.125;
        let mut want = vec![0f64; g * hd];
        for h in 0..g {
            let s: Vec<f64> = (0..len)
                .map(|p| {
                    (0..hd)
                        .map(|d| q[h * hd + d] as f64 * keys_t[d * stride + p] as f64)
                        .sum::<f64>()
                        * scale as f64
                })
                .collect();
            let max = s.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for p in 0..len {
                for d in 0..hd {
                    want[h * hd + d] += e[p] / sum * values[p * hd + d] as f64;
                }
            }
        }
        let mut scratch = Vec::new();
        let mut out = vec![f32::NAN; g * hd];
        attend_group(
            &q,
            hd,
            &keys_t,
            stride,
            &values,
            scale,
            &mut scratch,
            &mut out,
        );
        for (a, b) in out.iter().zip(&want) {
            assert!((*a as f64 - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn axpy_adds_scaled() {
        let x = noise(100, 3);
        let mut y = noise(100, 4);
        let before = y.clone();
        axpy(0.5, &x, &mut y);
        for i in 0..100 {
            assert!((y[i] - (before[i] + 0.5 * x[i])).abs() < 1e-6);
        }
    }
}
