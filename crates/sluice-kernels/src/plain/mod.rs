//! The plain-loop definitions that the safe wrappers run on the portable path and the
//! kernels of `x86/` compile again with their CPU features (or fall back to), with
//! `exp_fast`, which they all use. A leaf beside `layout`: plain Rust, no `unsafe`.

mod activation;
mod acts;
mod attention;
mod dot;
mod softmax;

pub(crate) use activation::{gelu_body, silu_body};
pub(crate) use acts::quantise_block;
pub(crate) use attention::{attend_body, softmax_unnormalised};
pub(crate) use dot::dot_body;
pub(crate) use softmax::{bins_body, exp_sum_body, max_body, weights_body};

/// `e^x` (Cephes' expf: range reduction by ln 2 and a degree-6 polynomial, within a few
/// ulp), written so that it vectorises; `x` is clamped to [-87, 88].
#[inline(always)]
pub fn exp_fast(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    // Round half to even by adding and removing 1.5 x 2^23 (exact for |v| < 2^22): the
    // same result as `round_ties_even`, which without SSE4.1 is a libm call per element.
    const SHIFT: f32 = 12_582_912.0;
    let big = x * std::f32::consts::LOG2_E + SHIFT;
    let n = big - SHIFT;
    // The integer `n` is in `big`'s low mantissa bits (its ulp is 1): read it from there,
    // a vector integer subtraction, where `n as i32` (a saturating conversion) is a scalar
    // instruction per element.
    let ni = (big.to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32);
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    y * f32::from_bits(((ni + 127) << 23) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_fast_reads_the_exponent_as_the_saturating_conversion_did() {
        // The previous form, `n as i32`: every result must keep its bits.
        fn before(x: f32) -> f32 {
            let x = x.clamp(-87.0, 88.0);
            let n = (x * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
            let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
            let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2)
                * r
                + 1.666_666_5e-1)
                * r
                + 0.5;
            (p * (r * r) + r + 1.0) * f32::from_bits(((n as i32 + 127) << 23) as u32)
        }
        let specials = [f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-30, -1e-30];
        for x in (-100_000..=100_000)
            .map(|i| i as f32 / 1000.0)
            .chain(specials)
        {
            assert_eq!(exp_fast(x).to_bits(), before(x).to_bits(), "exp({x})");
        }
        assert!(exp_fast(f32::NAN).is_nan());
    }

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
}
