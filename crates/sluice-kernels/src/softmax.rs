//! The passes sampling makes over a whole vocabulary (49,152 to 262,144 logits per row and
//! step): the largest logit, the temperature weights with their total, and the softmax
//! normaliser. Plain loops in fixed lanes (`plain/softmax.rs`), compiled per instruction
//! set (`x86/avx2/mod.rs`, `x86/avx512/mod.rs`): the same operations in the same order at
//! every level, so every level gives the same bits (Rust never fuses a multiply and an add
//! by itself).

use crate::plain::{bins_body, exp_sum_body, max_body, weights_body};
use crate::simd::Simd;

macro_rules! dispatch {
    ($name:ident($($arg:expr),*)) => {
        match Simd::current() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Simd::current` only returns a level whose features the CPU reports.
            Simd::Avx512 => unsafe { crate::x86::avx512::$name($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Simd::Avx2 => unsafe { crate::x86::avx2::$name($($arg),*) },
            _ => $name($($arg),*),
        }
    };
}

/// The largest value, NaN skipped (`f32::max` folded; -inf for none).
pub fn max_value(values: &[f32]) -> f32 {
    dispatch!(max_body(values))
}

/// `w[i] = e^((l[i] - max) / t)` (exactly 0 where `l[i]` is -inf) and the total of `w`,
/// summed in f64 in 8 lanes (element `i` into lane `i % 8`), then the lanes in order.
pub fn exp_weights(logits: &[f32], max: f32, t: f32, w: &mut [f32]) -> f64 {
    assert_eq!(logits.len(), w.len(), "one weight per logit");
    dispatch!(weights_body(logits, max, t, w))
}

/// `bins[i] = round((max - l[i]) · scale)`, at most `last` (which is below 2^16): the
/// bin of each logit below the best one, non-decreasing as logits fall (-inf in `last`).
/// The logits hold no NaN.
pub fn bin_indices(logits: &[f32], max: f32, scale: f32, last: u16, bins: &mut [u16]) {
    assert_eq!(logits.len(), bins.len(), "one bin per logit");
    dispatch!(bins_body(logits, max, scale, last, bins))
}

/// `Σ e^(l[i] - max)` in f32, element `i` into lane `i % 16`, then the lanes in order.
pub fn exp_sum(logits: &[f32], max: f32) -> f32 {
    dispatch!(exp_sum_body(logits, max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::noise;

    #[test]
    fn every_level_gives_the_bits_of_the_plain_loops() {
        let mut l: Vec<f32> = noise(49_157, 5).iter().map(|v| v * 20.0).collect();
        l[3] = f32::NEG_INFINITY;
        l[4000] = f32::NAN;
        let max = max_value(&l);
        assert_eq!(max.to_bits(), max_body(&l).to_bits());
        assert!(l.iter().all(|x| x.is_nan() || *x <= max));
        let (mut w, mut w0) = (vec![0f32; l.len()], vec![0f32; l.len()]);
        let total = exp_weights(&l, max, 0.8, &mut w);
        assert_eq!(
            total.to_bits(),
            weights_body(&l, max, 0.8, &mut w0).to_bits()
        );
        assert!(w.iter().zip(&w0).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_eq!(w[3], 0.0);
        let mut bins = vec![0u16; l.len()];
        let finite_l: Vec<f32> = l
            .iter()
            .map(|x| if x.is_nan() { 0.0 } else { *x })
            .collect();
        bin_indices(&finite_l, max, 16.0 / 0.8, 511, &mut bins);
        for (i, (&b, &x)) in bins.iter().zip(&finite_l).enumerate() {
            let want = ((max - x) * 20.0).clamp(0.0, 511.0).round_ties_even() as u16;
            assert_eq!(b, want, "logit {i}: {x}");
        }
        let finite: Vec<f32> = l.iter().copied().filter(|x| x.is_finite()).collect();
        let s = exp_sum(&finite, max);
        assert_eq!(s.to_bits(), exp_sum_body(&finite, max).to_bits());
        let want: f64 = finite.iter().map(|x| ((x - max) as f64).exp()).sum();
        assert!((s as f64 - want).abs() < 1e-4 * want, "{s} vs {want}");
    }
}
