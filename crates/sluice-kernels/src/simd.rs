//! The instruction-set level, detected once, and the f32 dot product.
//!
//! Kernel bodies are written once (`plain/`) and compiled three times: with AVX-512
//! (`x86/avx512/mod.rs`), with AVX2+FMA (`x86/avx2/mod.rs`) and for the baseline target. `SLUICE_KERNEL=portable|avx2|avx512`
//! forces a path (tests use it to cover the fallback); an unsupported choice falls back to
//! what the CPU has.

use std::sync::OnceLock;

use crate::plain::dot_body;

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
    #[inline]
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
#[inline]
pub fn dot_at(level: Simd, a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports.
        Simd::Avx512 => unsafe { crate::x86::avx512::dot(a, b) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 => unsafe { crate::x86::avx2::dot(a, b) },
        _ => dot_body(a, b, |x, y, acc| x * y + acc),
    }
}

/// Deterministic test data in [-0.5, 0.5) (an LCG), shared by the kernel tests.
#[doc(hidden)]
pub fn noise(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

/// Tests a check at every instruction-set level: `level_tests!(check)` makes the tests
/// `check::portable`, `check::avx2` and `check::avx512`, each calling `check(level)`. A
/// level this machine's CPU lacks is reported by the test harness as ignored, with the
/// reason (`build.rs` sets `cpu_avx2` / `cpu_avx512`); a level that runs first confirms
/// the CPU has it.
#[cfg(test)]
#[macro_export]
macro_rules! level_tests {
    ($check:ident) => {
        mod $check {
            use $crate::simd::Simd;

            fn at(level: Simd) {
                assert!(
                    level as u8 <= Simd::detected() as u8,
                    "built for {level:?}, but this CPU lacks it"
                );
                super::$check(level)
            }

            #[test]
            fn portable() {
                at(Simd::Portable)
            }

            #[test]
            #[cfg_attr(not(cpu_avx2), ignore = "this CPU lacks AVX2 (with FMA and F16C)")]
            fn avx2() {
                at(Simd::Avx2)
            }

            #[test]
            #[cfg_attr(not(cpu_avx512), ignore = "this CPU lacks AVX-512 (F, BW, VNNI)")]
            fn avx512() {
                at(Simd::Avx512)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::level_tests!(every_level_matches_f64_reference);

    fn every_level_matches_f64_reference(level: Simd) {
        for n in [1, 7, 31, 32, 33, 576, 1536, 1000] {
            let (a, b) = (noise(n, 1), noise(n, 2));
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            {
                let got = dot_at(level, &a, &b) as f64;
                assert!(
                    (got - exact).abs() < 1e-4,
                    "{level:?} n={n}: {got} vs {exact}"
                );
            }
        }
    }
}
