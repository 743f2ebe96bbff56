//! The plain loops of the gated activations (`activation.rs` dispatches), which every
//! level compiles.

use super::exp_fast;

#[inline(always)]
pub(crate) fn silu_body(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp_fast(-*g)) * u;
    }
}

/// GELU as `x * sigmoid(2·√(2/π)·(x + 0.044715x³))`, which equals the tanh form.
#[inline(always)]
pub(crate) fn gelu_body(gate: &mut [f32], up: &[f32]) {
    const K: f32 = 0.797_884_6; // √(2/π)
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        let t = 2.0 * K * (x + 0.044_715 * x * x * x);
        *g = x / (1.0 + exp_fast(-t)) * u;
    }
}
