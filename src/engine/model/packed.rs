//! Fast paths for the block formats with 32-weight blocks and one or two scales (Q4_0,
//! Q4_1, Q8_0): weights stay quantised in memory and are expanded to f32 in registers, one
//! block at a time, and each expanded block is reused for up to 8 activation rows.
//!
//! Every format is written as `w = q * d + m` (Q4_0: `m = -8d`; Q8_0: `m = 0`). The kernel
//! body is compiled for AVX-512, for AVX2+FMA and for the baseline target, and chosen at
//! run time (`kernels::Simd`). Each output element is accumulated in the same order
//! whatever the batch size, so a sequence gets the same numbers alone or in a batch.

use candle_core::quantized::GgmlDType;
use half::f16;

use super::kernels::Simd;

/// Weights per block.
pub const BLOCK: usize = 32;
/// Activation rows that share one expanded block.
pub(super) const ROWS: usize = 4;

/// How a block's quants are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quants {
    /// 16 bytes: weights j and j+16 in the low and high nibble of byte j.
    Nibbles,
    /// 32 signed bytes.
    Bytes,
}

/// A matrix of 32-weight blocks, scales unpacked to f32.
pub struct PackedMatrix {
    rows: usize,
    cols: usize,
    kind: Quants,
    d: Vec<f32>,
    m: Vec<f32>,
    qs: Vec<u8>,
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

impl PackedMatrix {
    /// Repacks GGUF blocks of `dtype`; `None` for formats without a fast path.
    pub fn new(dtype: GgmlDType, bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        let (kind, size, qbytes) = match dtype {
            GgmlDType::Q4_0 => (Quants::Nibbles, 18, 16),
            GgmlDType::Q4_1 => (Quants::Nibbles, 20, 16),
            GgmlDType::Q8_0 => (Quants::Bytes, 34, 32),
            _ => return None,
        };
        if !cols.is_multiple_of(BLOCK) {
            return None;
        }
        let n = rows * cols / BLOCK;
        let mut p = Self {
            rows,
            cols,
            kind,
            d: Vec::with_capacity(n),
            m: Vec::with_capacity(n),
            qs: Vec::with_capacity(n * qbytes),
        };
        for blk in bytes.chunks_exact(size).take(n) {
            let d = f16_at(blk, 0);
            let (m, q) = match dtype {
                GgmlDType::Q4_0 => (-8.0 * d, &blk[2..]),
                GgmlDType::Q4_1 => (f16_at(blk, 2), &blk[4..]),
                _ => (0.0, &blk[2..]),
            };
            p.d.push(d);
            p.m.push(m);
            p.qs.extend_from_slice(q);
        }
        Some(p)
    }

    fn qbytes(&self) -> usize {
        match self.kind {
            Quants::Nibbles => 16,
            Quants::Bytes => 32,
        }
    }

    /// Row `r` as f32.
    pub fn row(&self, r: usize, out: &mut [f32]) {
        let nb = self.cols / BLOCK;
        for b in 0..nb {
            let i = r * nb + b;
            let w = expand(
                self.kind,
                &self.qs[i * self.qbytes()..(i + 1) * self.qbytes()],
                self.d[i],
                self.m[i],
                |a, b, c| a * b + c,
            );
            out[b * BLOCK..(b + 1) * BLOCK].copy_from_slice(&w);
        }
    }

    /// `y[i * stride + r] = x_i · W_r` for every activation row i < n and weight row r in
    /// `r0..r1`, at the current SIMD level.
    ///
    /// # Safety
    /// `y` must be valid for writes at those indices, and no other thread may write them.
    pub unsafe fn matmul_rows(
        &self,
        x: &[f32],
        n: usize,
        r0: usize,
        r1: usize,
        y: *mut f32,
        stride: usize,
    ) {
        // SAFETY: forwarded.
        unsafe { self.matmul_rows_at(Simd::current(), x, n, r0, r1, y, stride) }
    }

    /// As `matmul_rows`, at a given level (which must not exceed `Simd::detected()`).
    ///
    /// # Safety
    /// As `matmul_rows`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn matmul_rows_at(
        &self,
        level: Simd,
        x: &[f32],
        n: usize,
        r0: usize,
        r1: usize,
        y: *mut f32,
        stride: usize,
    ) {
        assert!(r1 <= self.rows && x.len() >= n * self.cols, "matmul shapes");
        assert!(
            level as u8 <= Simd::detected() as u8,
            "{level:?} is not available on this CPU"
        );
        match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the level's features are present (asserted); the caller's contract
            // covers `y`.
            Simd::Avx512 => unsafe {
                super::packed_x86::rows_avx512(self, x, n, r0, r1, y, stride)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Simd::Avx2 => unsafe { super::packed_x86::rows_avx2(self, x, n, r0, r1, y, stride) },
            // SAFETY: the caller's contract covers `y`.
            _ => unsafe { rows_portable(self, x, n, r0, r1, y, stride) },
        }
    }

    /// Blocks per row.
    pub(super) fn blocks_per_row(&self) -> usize {
        self.cols / BLOCK
    }

    /// Columns (input features).
    pub(super) fn cols(&self) -> usize {
        self.cols
    }

    /// Whether blocks hold nibbles (Q4_0, Q4_1) rather than bytes (Q8_0).
    pub(super) fn nibbles(&self) -> bool {
        self.kind == Quants::Nibbles
    }

    /// Scale, offset and quant bytes of block `i` (row-major block index).
    #[inline(always)]
    pub(super) fn block(&self, i: usize) -> (f32, f32, &[u8]) {
        let qb = self.qbytes();
        (self.d[i], self.m[i], &self.qs[i * qb..(i + 1) * qb])
    }
}

/// One block as 32 f32 weights.
#[inline(always)]
fn expand(
    kind: Quants,
    q: &[u8],
    d: f32,
    m: f32,
    fma: impl Fn(f32, f32, f32) -> f32,
) -> [f32; BLOCK] {
    let mut w = [0f32; BLOCK];
    match kind {
        Quants::Nibbles => {
            let q: &[u8; 16] = q[..16].try_into().expect("16 quant bytes");
            for j in 0..16 {
                w[j] = fma((q[j] & 0x0F) as f32, d, m);
                w[j + 16] = fma((q[j] >> 4) as f32, d, m);
            }
        }
        Quants::Bytes => {
            let q: &[u8; 32] = q[..32].try_into().expect("32 quant bytes");
            for j in 0..BLOCK {
                w[j] = fma(q[j] as i8 as f32, d, m);
            }
        }
    }
    w
}

/// Lane-wise accumulation of `w · x` into 16 sums (no reassociation across lanes).
#[inline(always)]
fn accumulate(
    acc: &mut [f32; 16],
    w: &[f32; BLOCK],
    x: &[f32],
    fma: &impl Fn(f32, f32, f32) -> f32,
) {
    let x: &[f32; BLOCK] = x[..BLOCK].try_into().expect("a block of activations");
    for j in 0..16 {
        acc[j] = fma(w[j], x[j], acc[j]);
    }
    for j in 0..16 {
        acc[j] = fma(w[j + 16], x[j + 16], acc[j]);
    }
}

#[inline(always)]
fn reduce(acc: &[f32; 16]) -> f32 {
    let mut h = [0f32; 8];
    for j in 0..8 {
        h[j] = acc[j] + acc[j + 8];
    }
    let q = [h[0] + h[4], h[1] + h[5], h[2] + h[6], h[3] + h[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}

/// `R` activation rows starting at `i0` against weight row `r`.
#[inline(always)]
fn dot_rows<const R: usize>(
    p: &PackedMatrix,
    x: &[f32],
    i0: usize,
    r: usize,
    fma: &impl Fn(f32, f32, f32) -> f32,
) -> [f32; R] {
    let nb = p.cols / BLOCK;
    let qb = p.qbytes();
    let mut acc = [[0f32; 16]; R];
    for b in 0..nb {
        let i = r * nb + b;
        let w = expand(p.kind, &p.qs[i * qb..(i + 1) * qb], p.d[i], p.m[i], fma);
        for (k, a) in acc.iter_mut().enumerate() {
            let off = (i0 + k) * p.cols + b * BLOCK;
            accumulate(a, &w, &x[off..off + BLOCK], fma);
        }
    }
    let mut out = [0f32; R];
    for k in 0..R {
        out[k] = reduce(&acc[k]);
    }
    out
}

/// Defines a kernel `$name` that fills `y[i * stride + r] = x_i · W_r` for i < n and r in
/// r0..r1 with `$dot`, the same loop for every SIMD level (the x86 kernels add their
/// `target_feature` attribute).
macro_rules! rows_kernel {
    ($(#[$attr:meta])* $name:ident, $dot:ident) => {
        /// `y[i * stride + r] = x_i · W_r` for i < n, r in r0..r1.
        ///
        /// # Safety
        /// The CPU has the enabled features; `y` is valid and exclusive at those indices.
        $(#[$attr])*
        pub(super) unsafe fn $name(
            p: &PackedMatrix,
            x: &[f32],
            n: usize,
            r0: usize,
            r1: usize,
            y: *mut f32,
            stride: usize,
        ) {
            // Activation rows in groups of ROWS stay in L1 while the weight rows of the
            // tile stream past them.
            let mut i = 0;
            while i + ROWS <= n {
                for r in r0..r1 {
                    // SAFETY: shapes checked by `matmul_rows_at`; features by the caller.
                    let v = unsafe { $dot::<ROWS>(p, x, i, r) };
                    for (k, val) in v.iter().enumerate() {
                        // SAFETY: in bounds and exclusive by the caller's contract.
                        unsafe { *y.add((i + k) * stride + r) = *val };
                    }
                }
                i += ROWS;
            }
            while i < n {
                for r in r0..r1 {
                    // SAFETY: as above.
                    let v = unsafe { $dot::<1>(p, x, i, r) };
                    // SAFETY: as above.
                    unsafe { *y.add(i * stride + r) = v[0] };
                }
                i += 1;
            }
        }
    };
}
pub(super) use rows_kernel;

/// `dot_rows` with plain multiply-add, for the baseline path.
///
/// # Safety
/// None beyond `dot_rows`'s; `unsafe` only to share the kernel loop with the x86 paths.
#[inline(always)]
unsafe fn dot_portable<const R: usize>(
    p: &PackedMatrix,
    x: &[f32],
    i0: usize,
    r: usize,
) -> [f32; R] {
    dot_rows::<R>(p, x, i0, r, &|a: f32, b: f32, c: f32| a * b + c)
}

// The baseline-target path: plain Rust, one block expanded at a time.
rows_kernel!(rows_portable, dot_portable);

#[cfg(test)]
mod tests {
    use candle_core::quantized::k_quants::{BlockQ4_0, BlockQ4_1, BlockQ8_0, GgmlType};

    use super::super::kernels::noise;
    use super::*;

    /// Quantises random weights with candle and returns the file bytes and candle's own
    /// dequantisation (the reference).
    fn quantised<B: GgmlType>(rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
        let w = noise(rows * cols, 9);
        let mut blocks = vec![B::zeros(); rows * cols / B::BLCK_SIZE];
        B::from_float(&w, &mut blocks);
        let mut deq = vec![0f32; rows * cols];
        B::to_float(&blocks, &mut deq);
        let size = std::mem::size_of::<B>();
        // SAFETY: candle's blocks are plain `repr(C)` data; we read their bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(blocks.as_ptr() as *const u8, blocks.len() * size)
        }
        .to_vec();
        (bytes, deq)
    }

    fn check(dtype: GgmlDType, bytes: &[u8], deq: &[f32], rows: usize, cols: usize) {
        let p = PackedMatrix::new(dtype, bytes, rows, cols).expect("fast path");
        let mut row = vec![0f32; cols];
        for r in 0..rows {
            p.row(r, &mut row);
            assert_eq!(row, deq[r * cols..(r + 1) * cols], "{dtype:?} row {r}");
        }
        for n in [1, 3, 4, 5, 9] {
            let x = noise(n * cols, 7 + n as u32);
            let want: Vec<f64> = (0..n)
                .flat_map(|i| (0..rows).map(move |r| (i, r)))
                .map(|(i, r)| {
                    (0..cols)
                        .map(|c| x[i * cols + c] as f64 * deq[r * cols + c] as f64)
                        .sum()
                })
                .collect();
            for level in [Simd::Portable, Simd::Avx2, Simd::Avx512] {
                if level as u8 > Simd::detected() as u8 {
                    continue;
                }
                let mut y = vec![f32::NAN; n * rows];
                // SAFETY: y has n * rows elements and this thread alone writes them.
                unsafe { p.matmul_rows_at(level, &x, n, 0, rows, y.as_mut_ptr(), rows) };
                for (k, (a, b)) in y.iter().zip(&want).enumerate() {
                    assert!(
                        (*a as f64 - b).abs() < 1e-4 * (1.0 + b.abs()),
                        "{dtype:?} {level:?} n={n} [{k}]: {a} vs {b}"
                    );
                }
                // Batch invariance: row 0 computed alone is bit-identical to row 0 in the batch.
                let mut y1 = vec![0f32; rows];
                // SAFETY: as above.
                unsafe { p.matmul_rows_at(level, &x[..cols], 1, 0, rows, y1.as_mut_ptr(), rows) };
                assert_eq!(
                    y1,
                    y[..rows],
                    "{dtype:?} {level:?} n={n}: batch changes row 0"
                );
            }
        }
    }

    #[test]
    fn every_fast_path_matches_candle_dequantisation_on_every_level() {
        // 3 blocks per row: an odd count exercises the unpaired tail block.
        let (rows, cols) = (7, 96);
        let (b, d) = quantised::<BlockQ4_0>(rows, cols);
        check(GgmlDType::Q4_0, &b, &d, rows, cols);
        let (b, d) = quantised::<BlockQ4_1>(rows, cols);
        check(GgmlDType::Q4_1, &b, &d, rows, cols);
        let (b, d) = quantised::<BlockQ8_0>(rows, cols);
        check(GgmlDType::Q8_0, &b, &d, rows, cols);
        assert!(PackedMatrix::new(GgmlDType::Q4K, &b, rows, cols).is_none());
    }
}
