//! The plain loops of the vocabulary passes (`softmax.rs` dispatches), which every level
//! compiles: the same operations in the same order, so every level gives the same bits.

use super::exp_fast;

#[inline(always)]
pub(crate) fn max_body(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = values.chunks_exact(16);
    for c in &mut chunks {
        let c: &[f32; 16] = c.try_into().expect("16 values");
        for j in 0..16 {
            lanes[j] = lanes[j].max(c[j]);
        }
    }
    for (m, x) in lanes.iter_mut().zip(chunks.remainder()) {
        *m = m.max(*x);
    }
    lanes.into_iter().fold(f32::NEG_INFINITY, f32::max)
}

/// One temperature weight (exactly 0 for a forbidden token).
#[inline(always)]
fn weight(l: f32, max: f32, t: f32) -> f32 {
    let e = exp_fast((l - max) / t);
    if l == f32::NEG_INFINITY { 0.0 } else { e }
}

#[inline(always)]
pub(crate) fn weights_body(logits: &[f32], max: f32, t: f32, w: &mut [f32]) -> f64 {
    // Whole chunks of 8 as fixed-size arrays, so the compiler keeps the lanes in vectors.
    let mut sums = [0f64; 8];
    let mut lc = logits.chunks_exact(8);
    let mut wc = w.chunks_exact_mut(8);
    for (l, w) in (&mut lc).zip(&mut wc) {
        let l: &[f32; 8] = l.try_into().expect("8 logits");
        let w: &mut [f32; 8] = w.try_into().expect("8 weights");
        for j in 0..8 {
            w[j] = weight(l[j], max, t);
        }
        for j in 0..8 {
            sums[j] += w[j] as f64;
        }
    }
    for ((w, l), s) in wc
        .into_remainder()
        .iter_mut()
        .zip(lc.remainder())
        .zip(&mut sums)
    {
        *w = weight(*l, max, t);
        *s += *w as f64;
    }
    sums.iter().sum()
}

#[inline(always)]
pub(crate) fn bins_body(logits: &[f32], max: f32, scale: f32, last: u16, bins: &mut [u16]) {
    // Adding 2^23 rounds a value in [0, 2^22] to an integer held in the low mantissa bits
    // (a vector addition, where `as` would be a scalar saturating conversion).
    const SHIFT: f32 = 8_388_608.0;
    let top = last as f32;
    for (b, l) in bins.iter_mut().zip(logits) {
        let v = ((max - l) * scale).clamp(0.0, top) + SHIFT;
        *b = (v.to_bits() - SHIFT.to_bits()) as u16;
    }
}

#[inline(always)]
pub(crate) fn exp_sum_body(logits: &[f32], max: f32) -> f32 {
    let mut sums = [0f32; 16];
    let mut chunks = logits.chunks_exact(16);
    for c in &mut chunks {
        let c: &[f32; 16] = c.try_into().expect("16 logits");
        let mut e = [0f32; 16];
        for j in 0..16 {
            e[j] = exp_fast(c[j] - max);
        }
        for j in 0..16 {
            sums[j] += e[j];
        }
    }
    for (s, l) in sums.iter_mut().zip(chunks.remainder()) {
        *s += exp_fast(l - max);
    }
    sums.iter().sum()
}
