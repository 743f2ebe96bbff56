//! The plain loop of one activation block's quantisation (`acts.rs` quantises whole rows),
//! which the AVX2 and AVX-512 kernels take over for the blocks they cannot do exactly.

/// One block of 32: its quants into `qb`; returns the sums of each half's quants and the
/// scale.
#[inline(always)]
pub(crate) fn quantise_block(xb: &[f32], qb: &mut [i8]) -> (i32, i32, f32) {
    let mut amax = 0f32;
    for v in xb {
        amax = amax.max(v.abs());
    }
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut sums = [0i32; 2];
    for (h, (xh, qh)) in xb.chunks_exact(16).zip(qb.chunks_exact_mut(16)).enumerate() {
        let mut s = 0i32;
        for (q, v) in qh.iter_mut().zip(xh) {
            // Within the quant range: only a block the SIMD kernels hand over (a NaN, an
            // infinity, a scale whose inverse overflows) can reach past it, and its sums
            // must not overflow.
            let r = (v * id).round_ties_even().clamp(-127.0, 127.0) as i32;
            *q = r as i8;
            s += r;
        }
        sums[h] = s;
    }
    (sums[0], sums[1], d)
}
