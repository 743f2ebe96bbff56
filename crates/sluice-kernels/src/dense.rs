//! Unquantised weights (F32, F16, BF16) kept as stored and multiplied row by row: each
//! output is one dot product of an f32 activation row with a weight row, its 16-bit values
//! widened to f32 in registers (F16C for F16, a shift for BF16). Nothing is dequantised
//! into a buffer, and every output is computed the same way whatever the batch size.

use half::{bf16, f16};

use crate::layout::Huge;
use crate::simd::{Simd, dot_at};

/// The stored values, on huge pages as the packed weights are (`layout/pages.rs`).
pub(crate) enum Values {
    F32(Huge<f32>),
    F16(Huge<u16>),
    Bf16(Huge<u16>),
}

/// A `rows x cols` unquantised matrix.
pub(crate) struct Dense {
    pub values: Values,
    pub cols: usize,
}

fn halves(bytes: &[u8]) -> Huge<u16> {
    let mut out = Huge::zeroed(bytes.len() / 2);
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = u16::from_le_bytes([b[0], b[1]]);
    }
    out
}

impl Dense {
    /// F32 data from little-endian bytes.
    pub fn f32(bytes: &[u8], cols: usize) -> Self {
        let mut v = Huge::zeroed(bytes.len() / 4);
        for (o, b) in v.iter_mut().zip(bytes.chunks_exact(4)) {
            *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Self {
            values: Values::F32(v),
            cols,
        }
    }

    /// F16 data.
    pub fn f16(bytes: &[u8], cols: usize) -> Self {
        Self {
            values: Values::F16(halves(bytes)),
            cols,
        }
    }

    /// BF16 data.
    pub fn bf16(bytes: &[u8], cols: usize) -> Self {
        Self {
            values: Values::Bf16(halves(bytes)),
            cols,
        }
    }

    /// Row `r` as f32.
    pub fn row(&self, r: usize, out: &mut [f32]) {
        let c = self.cols;
        match &self.values {
            Values::F32(v) => out.copy_from_slice(&v[r * c..(r + 1) * c]),
            Values::F16(v) => {
                for (o, w) in out.iter_mut().zip(&v[r * c..(r + 1) * c]) {
                    *o = f16::from_bits(*w).to_f32();
                }
            }
            Values::Bf16(v) => {
                for (o, w) in out.iter_mut().zip(&v[r * c..(r + 1) * c]) {
                    *o = bf16::from_bits(*w).to_f32();
                }
            }
        }
    }

    /// `x · W_r` at the current SIMD level.
    #[inline]
    pub fn dot(&self, r: usize, x: &[f32]) -> f32 {
        let c = self.cols;
        let level = Simd::current();
        match &self.values {
            Values::F32(v) => dot_at(level, x, &v[r * c..(r + 1) * c]),
            Values::F16(v) => dot16::<false>(level, x, &v[r * c..(r + 1) * c]),
            Values::Bf16(v) => dot16::<true>(level, x, &v[r * c..(r + 1) * c]),
        }
    }
}

/// `x · w` for 16-bit weights (`BF`: bfloat16, else IEEE half).
#[inline]
pub(crate) fn dot16<const BF: bool>(level: Simd, x: &[f32], w: &[u16]) -> f32 {
    debug_assert_eq!(x.len(), w.len());
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` (the only source of `level` outside tests, which check
        // `detected` first) returns a level the CPU has; AVX-512 CPUs have AVX2 and F16C.
        Simd::Avx2 | Simd::Avx512 => unsafe { crate::x86::avx2::dot16::<BF>(x, w) },
        _ => dot16_portable::<BF>(x, w),
    }
}

/// Plain loops: the definition the SIMD path follows (8 lanes, then the lanes summed
/// pairwise, then the tail).
pub(crate) fn dot16_portable<const BF: bool>(x: &[f32], w: &[u16]) -> f32 {
    let widen = |b: u16| {
        if BF {
            f32::from_bits((b as u32) << 16)
        } else {
            f16::from_bits(b).to_f32()
        }
    };
    let mut acc = [0f32; 8];
    let n = x.len() / 8 * 8;
    for (xc, wc) in x[..n].chunks_exact(8).zip(w[..n].chunks_exact(8)) {
        for j in 0..8 {
            acc[j] = widen(wc[j]).mul_add(xc[j], acc[j]);
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (a, b) in x[n..].iter().zip(&w[n..]) {
        s = widen(*b).mul_add(*a, s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::noise;

    crate::level_tests!(every_level_matches_the_f64_dot_of_the_stored_values);

    fn every_level_matches_the_f64_dot_of_the_stored_values(level: Simd) {
        for n in [1, 7, 8, 33, 640, 1000] {
            let x = noise(n, 4);
            let w = noise(n, 5);
            let h: Vec<u16> = w.iter().map(|v| f16::from_f32(*v).to_bits()).collect();
            let b: Vec<u16> = w.iter().map(|v| bf16::from_f32(*v).to_bits()).collect();
            let exact = |ws: &dyn Fn(usize) -> f32| -> f64 {
                (0..n).map(|i| x[i] as f64 * ws(i) as f64).sum()
            };
            let eh = exact(&|i| f16::from_bits(h[i]).to_f32());
            let eb = exact(&|i| bf16::from_bits(b[i]).to_f32());
            {
                let gh = dot16::<false>(level, &x, &h) as f64;
                let gb = dot16::<true>(level, &x, &b) as f64;
                assert!((gh - eh).abs() < 1e-4, "{level:?} f16 n={n}: {gh} vs {eh}");
                assert!((gb - eb).abs() < 1e-4, "{level:?} bf16 n={n}: {gb} vs {eb}");
            }
        }
    }
}
