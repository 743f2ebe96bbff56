//! The plain loops of attention (`attention.rs` dispatches): the definition the AVX2 and
//! AVX-512 kernels follow, and the softmax each of them takes over its scores.

use super::exp_fast;
use super::softmax::max_body;
use crate::layout::{Attn, KEY_BLOCK, block_runs};

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

/// Plain loops: the definition the AVX-512 path follows. Each score is one chain of
/// multiply-adds over `d`; each output sums its positions in order.
#[inline(always)]
pub(crate) fn attend_body(
    a: &Attn,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let hd = a.hd;
    let g = a.q.len() / hd;
    let (start, end) = (a.start, a.len);
    assert!(start < end && out.len() == g * hd, "attention shapes");
    a.check_blocks(start, end);
    let len = end - start;
    scores.clear();
    scores.resize(g * len, 0.0);
    // Closures would be compiled without the caller's target features: plain loops. A
    // block at a time: inside one, a dimension's keys are adjacent.
    for (b, run) in block_runs(start, end) {
        let kb = &a.keys[a.block(b)..][..hd * KEY_BLOCK];
        let (from, to) = (run.start % KEY_BLOCK, (run.end - 1) % KEY_BLOCK + 1);
        for (d, k) in kb.chunks_exact(KEY_BLOCK).enumerate() {
            for h in 0..g {
                let qd = a.q[h * hd + d] * a.scale;
                let s = &mut scores[h * len + run.start - start..][..to - from];
                for (si, k) in s.iter_mut().zip(&k[from..to]) {
                    *si = fma(qd, k.to_f32_const(), *si);
                }
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
        for (b, run) in block_runs(start, end) {
            let vb = &a.values[a.block(b)..][..hd * KEY_BLOCK];
            let rows = vb.chunks_exact(hd).skip(run.start % KEY_BLOCK);
            for (p, v) in s[run.start - start..run.end - start].iter().zip(rows) {
                for (oi, vi) in o.iter_mut().zip(v) {
                    *oi = fma(*p, vi.to_f32_const(), *oi);
                }
            }
        }
        for oi in o.iter_mut() {
            *oi *= inv;
        }
    }
}
