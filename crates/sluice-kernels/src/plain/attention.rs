//! The plain loops of attention (`attention.rs` dispatches): the definition the AVX2 and
//! AVX-512 kernels follow, and the softmax each of them takes over its scores.

use super::exp_fast;
use super::softmax::max_body;
use crate::layout::{Attn, KEY_BLOCK, PartStat, block_runs};

/// Softmax in place over `s`, unnormalised (`exp(x - max)`); returns the max and the sum
/// of the exponentials (the output is the weighted sum times `1 / sum`).
#[inline(always)]
pub(crate) fn softmax_unnormalised(s: &mut [f32]) -> PartStat {
    let max = max_body(s);
    let mut sums = [0f32; 16];
    for c in s.chunks_mut(16) {
        for (l, x) in sums.iter_mut().zip(c) {
            *x = exp_fast(*x - max);
            *l += *x;
        }
    }
    PartStat {
        max,
        sum: sums.iter().sum::<f32>(),
    }
}

/// Plain loops: the definition the AVX-512 path follows. Each score is one chain of
/// multiply-adds over `d`; each output sums its positions in order. Each part of the row
/// (`ATTN_PART`) takes its own softmax and sum, into `out` (parts x g x hd, each
/// normalised by its own sum) and `stats` (parts x g).
#[inline(always)]
pub(crate) fn attend_body(
    a: &Attn,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [PartStat],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let hd = a.hd;
    let g = a.q.len() / hd;
    let (start, end) = (a.start, a.len);
    let parts = a.parts().len();
    assert!(
        start < end && out.len() == parts * g * hd && stats.len() == parts * g,
        "attention shapes"
    );
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
    // Each part (`ATTN_PART`) its own softmax and weighted sum, into its own output.
    for (i, c) in a.parts().enumerate() {
        let part = a.part(c).expect("a part of the row");
        let (ps, pe) = (part.start, part.len);
        for h in 0..g {
            let s = &mut scores[h * len + ps - start..h * len + pe - start];
            let stat = &mut stats[i * g + h];
            *stat = softmax_unnormalised(s);
            let inv = 1.0 / stat.sum;
            let o = &mut out[(i * g + h) * hd..][..hd];
            for (b, run) in block_runs(ps, pe) {
                let vb = &a.values[a.block(b)..][..hd * KEY_BLOCK];
                let rows = vb.chunks_exact(hd).skip(run.start % KEY_BLOCK);
                for (p, v) in s[run.start - ps..run.end - ps].iter().zip(rows) {
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
}
