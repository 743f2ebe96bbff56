//! The plain loops of attention (`attention.rs` dispatches): the definition the AVX2 and
//! AVX-512 kernels follow, and the softmax each of them takes over its scores.

use super::exp_fast;
use super::softmax::max_body;
use crate::layout::{Attn, key_index};

/// Softmax in place over `s`; returns 1 / the sum of the exponentials.
#[inline(always)]
pub(crate) fn softmax_unnormalised(s: &mut [f32]) -> f32 {
    let max = max_body(s);
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
pub(crate) fn attend_body(
    a: &Attn,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let hd = a.hd;
    let g = a.q.len() / hd;
    let (start, end) = (a.start, a.values.len() / hd);
    assert!(start < end && out.len() == g * hd, "attention shapes");
    let len = end - start;
    scores.clear();
    scores.resize(g * len, 0.0);
    // Closures would be compiled without the caller's target features: plain loops.
    for d in 0..hd {
        for h in 0..g {
            let qd = a.q[h * hd + d] * a.scale;
            let s = &mut scores[h * len..(h + 1) * len];
            for (si, p) in s.iter_mut().zip(start..end) {
                *si = fma(qd, a.keys_t[key_index(hd, d, p)].to_f32_const(), *si);
            }
        }
    }
    if let Some(cap) = a.softcap {
        for s in scores.iter_mut() {
            *s = cap * (*s / cap).tanh();
        }
    }
    out.fill(0.0);
    for h in 0..g {
        let s = &mut scores[h * len..(h + 1) * len];
        let inv = softmax_unnormalised(s);
        let o = &mut out[h * hd..(h + 1) * hd];
        for (p, v) in s.iter().zip(a.values[start * hd..].chunks_exact(hd)) {
            for (oi, vi) in o.iter_mut().zip(v) {
                *oi = fma(*p, vi.to_f32_const(), *oi);
            }
        }
        for oi in o.iter_mut() {
            *oi *= inv;
        }
    }
}
