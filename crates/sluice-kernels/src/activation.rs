//! Gated activations of the feed-forward block: `g = act(g) * u` for SwiGLU (SiLU) and
//! GeGLU (GELU, tanh approximation, as Gemma uses).

use crate::plain::{gelu_body, silu_body};
use crate::simd::Simd;

/// Elements per parallel task: element-wise work, so the split changes no result.
const TASK: usize = 1 << 14;

/// `gate = silu(gate) * up`, element-wise.
#[inline]
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "gate and up shapes");
    let level = Simd::current();
    crate::threads::for_each_chunk(gate, TASK, |i, gate| {
        let up = &up[i * TASK..][..gate.len()];
        match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Simd::current` only returns a level whose features the CPU reports.
            Simd::Avx512 => unsafe { crate::x86::avx512::silu_mul(gate, up) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Simd::Avx2 => unsafe { crate::x86::avx2::silu_mul(gate, up) },
            _ => silu_body(gate, up),
        }
    });
}

/// `gate = gelu(gate) * up`, element-wise (tanh approximation).
#[inline]
pub fn gelu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "gate and up shapes");
    let level = Simd::current();
    crate::threads::for_each_chunk(gate, TASK, |i, gate| {
        let up = &up[i * TASK..][..gate.len()];
        match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Simd::Avx512 => unsafe { crate::x86::avx512::gelu_mul(gate, up) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Simd::Avx2 => unsafe { crate::x86::avx2::gelu_mul(gate, up) },
            _ => gelu_body(gate, up),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::noise;

    #[test]
    fn activations_match_their_definitions() {
        let x: Vec<f32> = noise(200, 31).iter().map(|v| v * 12.0).collect();
        let u = noise(200, 32);
        let (mut s, mut g) = (x.clone(), x.clone());
        silu_mul(&mut s, &u);
        gelu_mul(&mut g, &u);
        for i in 0..x.len() {
            let xi = x[i] as f64;
            let silu = xi / (1.0 + (-xi).exp()) * u[i] as f64;
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (xi + 0.044715 * xi.powi(3));
            let gelu = 0.5 * xi * (1.0 + inner.tanh()) * u[i] as f64;
            assert!((s[i] as f64 - silu).abs() < 1e-5, "silu({xi})");
            assert!((g[i] as f64 - gelu).abs() < 1e-5, "gelu({xi})");
        }
    }
}
