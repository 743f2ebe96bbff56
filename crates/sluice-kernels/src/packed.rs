//! Quantised weights repacked for integer matmul kernels (llama.cpp's Q4_0x16 idea,
//! generalised to every format `formats.rs` decodes).
//!
//! Rows are taken in groups of 16. For each group and each block of `bk` columns, the
//! quants are stored chunk by chunk: chunk `c` is 64 bytes holding, for each of the 16
//! rows `j`, its 4 quants of columns `4c..4c+4` at bytes `4j..4j+4`. One `vpdpbusd` of a
//! chunk against 4 activation bytes broadcast to every lane then adds 4 products to each
//! row's sum: 16 rows advance together and no horizontal reduction is ever needed.
//! Formats whose quants fit in 4 bits store two chunks per 64 bytes (chunk `c` in the low
//! nibbles, chunk `c + bk/8` in the high ones). 5- and 6-bit formats use the
//! same nibble plane for their low 4 bits followed by a 64-byte *high plane*: byte `4j + t`
//! holds, for every chunk `c`, the bits above the nibble of row `j`'s quant `4c + t` at bits
//! `high·c..high·c + high` (`high` = 1 or 2), so Q5_0 takes 5.5 bits per weight as in the
//! file instead of 8. Decode reads every weight once per token from memory, and there the
//! compact form is faster; a batch of rows is bound by the instructions that unpack it,
//! and there a byte per quant is faster (1.2-1.6x, `benches/kernels`): such matrices keep
//! a second, byte-per-quant copy for batches (`PackedMatrix::for_batches`). With AVX-512
//! both go to the AVX-512 kernel, which merges a compact block's high plane into its
//! nibbles with one shift and one ternary op per chunk: decode 6-12% less time per token
//! than the compact form under the AVX2 kernel (SmolLM2 Q4_K_M, Gemma 3 on an AMD EPYC VM;
//! Q5_0 at one row 1.6x the weight GB/s from cache, `benches/kernels`); from 8 rows the
//! byte copy stays 10-30% faster (`SLUICE_BATCH_COPY=0` against the default). The two
//! forms give a row the same bits. Scales and
//! offsets are stored per group and block as 16 lanes: in f16 when that is exact (the
//! legacy formats); for the K-quants as the file keeps them, an i8 per block times an f16
//! per super-block of 256 weights (`Factors`, exact: the kernels multiply the two back
//! into the same f32), so a decode token reads 4.6 bits per Q4_K weight and 6.6 per Q6_K
//! weight, as the file stores them, instead of 6 and 8 with f32 lanes; f32 otherwise.
//! Where the offset is a fixed multiple of the scale (Q4_0, Q5_0, Q6_K, Q8_0) it is not
//! stored but derived.
//!
//! The matmul is `y = Σ_blocks d_w·d_a·(u·q_a) + m_w·(d_a·Σq_a)` with int8 activations
//! (`acts.rs`). Where the offset is `-2^s·d` (Q4_0, Q5_0, Q6_K in the AVX2 kernel's 16-bit
//! sums, `folded_shift`; those and Q8_0 in the AVX-512 kernel's 32-bit sums, `fold512`),
//! it is taken inside the integer sum instead: `y = Σ_blocks d_w·d_a·((u - 2^s)·q_a)`,
//! one multiply-add per block. Integer sums are exact, and each
//! output is computed in the same order whatever the batch size, so a sequence gets the
//! same numbers alone or in a batch.

use candle_core::quantized::GgmlDType;
use half::f16;
use rayon::prelude::*;

use crate::formats::{Format, decode_row, k_factors};
use crate::layout::{
    CHUNK, FOLDS, GROUP, HugeBytes, PackedMatrix, Part, QuantActs, Scratch, high_bits,
};
use crate::simd::Simd;

impl PackedMatrix {
    /// Repacks GGUF data of `dtype`; `None` for types without a fast path or shapes it
    /// cannot take.
    pub fn new(dtype: GgmlDType, bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        Self::with_layout(dtype, bytes, rows, cols, true)
    }

    /// The byte-per-quant copy of a matrix whose `new` layout is compact (5- and 6-bit
    /// quants), for batches of rows; `None` for every other matrix, and when
    /// `SLUICE_BATCH_COPY=0` asks to save the memory.
    pub fn for_batches(dtype: GgmlDType, bytes: &[u8], rows: usize, cols: usize) -> Option<Self> {
        static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let enabled =
            *ENABLED.get_or_init(|| std::env::var("SLUICE_BATCH_COPY").as_deref() != Ok("0"));
        let f = Format::of(dtype)?;
        let compact = (16..=63).contains(&f.max_u);
        if !enabled || !compact {
            return None;
        }
        Self::with_layout(dtype, bytes, rows, cols, false)
    }

    /// `new` with 5- and 6-bit quants `compact` (nibble and high planes) or a byte each.
    pub(crate) fn with_layout(
        dtype: GgmlDType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        compact: bool,
    ) -> Option<Self> {
        let signed = Simd::current() != Simd::Avx512;
        Self::packed_as(dtype, bytes, rows, cols, compact, signed)
    }

    /// `with_layout`, Q8_0 packed `signed` (as for the AVX2 and portable kernels) or as
    /// `q + 128` (as for the AVX-512 kernel) whatever the level in force.
    pub(crate) fn packed_as(
        dtype: GgmlDType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
        compact: bool,
        signed_q8: bool,
    ) -> Option<Self> {
        let f = Format::of(dtype)?;
        if !cols.is_multiple_of(f.block_weights) || !cols.is_multiple_of(32) {
            return None;
        }
        let row_bytes = cols / f.block_weights * f.block_bytes;
        if bytes.len() < rows * row_bytes {
            return None;
        }
        let nb = cols / f.bk;
        let groups = rows.div_ceil(GROUP);
        let bits = match f.max_u {
            0..=15 => 4,
            16..=31 => 5,
            32..=63 => 6,
            _ => 8,
        };
        // Compact 5- and 6-bit quants: a nibble plane and a high plane.
        let nibbles = bits == 4 || (compact && bits < 8);
        let high = high_bits(nibbles, bits);
        // Decode every row once (in parallel), then interleave.
        let mut u = Scratch::<u8>::zeroed(groups * GROUP * cols);
        let mut d = Scratch::<f32>::zeroed(groups * GROUP * nb);
        let mut m = Scratch::<f32>::zeroed(groups * GROUP * nb);
        u.par_chunks_mut(cols)
            .zip(d.par_chunks_mut(nb).zip(m.par_chunks_mut(nb)))
            .take(rows)
            .enumerate()
            .for_each(|(r, (u, (d, m)))| {
                decode_row(dtype, &bytes[r * row_bytes..(r + 1) * row_bytes], u, d, m)
            });
        let signed = dtype == GgmlDType::Q8_0 && signed_q8;
        if signed {
            u.iter_mut().for_each(|q| *q = q.wrapping_sub(128));
            m.iter_mut().for_each(|v| *v = 0.0);
        }
        let k = match dtype {
            _ if signed => Some(0.0),
            GgmlDType::Q4_0 => Some(-8.0),
            GgmlDType::Q5_0 => Some(-16.0),
            GgmlDType::Q6K => Some(-32.0),
            GgmlDType::Q8_0 => Some(-128.0),
            _ => None,
        };
        // Derived only where every offset is exactly k·d, as the decoder made it.
        let m_of_d = k.filter(|k| m.iter().zip(d.iter()).all(|(m, d)| *m == k * d));
        let stored_m: &[f32] = if m_of_d.is_some() { &[] } else { &m };
        let half = d
            .iter()
            .chain(stored_m)
            .all(|&v| f16::from_f32(v).to_f32() == v);
        let mut p = Self {
            rows,
            cols,
            bk: f.bk,
            nibbles,
            wide: f.max_u > 63 && !signed,
            signed,
            bits,
            m_of_d,
            half,
            factored: 0,
            qs: HugeBytes::zeroed(groups * nb * Self::quant_bytes(f.bk, nibbles, high)),
            d: HugeBytes::default(),
            m: HugeBytes::default(),
            dsup: HugeBytes::default(),
            msup: HugeBytes::default(),
        };
        let qb = p.block_quant_bytes();
        p.qs.par_chunks_mut(qb).enumerate().for_each(|(i, out)| {
            Self::pack_block(i / nb, i % nb, cols, f.bk, nibbles, high, &u, out)
        });
        // Scales: [group][block][16 lanes].
        let lanes = |v: &[f32]| -> Scratch<f32> {
            let mut out = Scratch::zeroed(groups * nb * GROUP);
            for g in 0..groups {
                for b in 0..nb {
                    for j in 0..GROUP {
                        out[(g * nb + b) * GROUP + j] = v[(g * GROUP + j) * nb + b];
                    }
                }
            }
            out
        };
        let bytes_of = |v: Scratch<f32>| -> HugeBytes {
            let size = if half { 2 } else { 4 };
            let mut out = HugeBytes::zeroed(v.len() * size);
            for (o, x) in out.chunks_exact_mut(size).zip(v.iter()) {
                if half {
                    o.copy_from_slice(&f16::from_f32(*x).to_le_bytes());
                } else {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            }
            out
        };
        // K-quant scales kept as the file keeps them where that gives every value
        // exactly: a decode token then reads 4.6 bits per Q4_K weight instead of 6 (f32
        // scale and offset per 32 weights), 6.6 per Q6_K weight instead of 8.
        let factors = if half {
            None
        } else {
            Factors::of(
                dtype,
                bytes,
                rows,
                row_bytes,
                groups * GROUP,
                &d,
                m_of_d.is_none().then_some(&m[..]),
            )
        };
        if let Some(fs) = factors {
            p.factored = fs.per;
            p.d = fs.sub_lanes(&fs.dsub, groups, nb);
            p.dsup = fs.sup_lanes(&fs.dsup, groups, nb / fs.per);
            if m_of_d.is_none() {
                p.m = fs.sub_lanes(&fs.msub, groups, nb);
                p.msup = fs.sup_lanes(&fs.msup, groups, nb / fs.per);
            }
            return Some(p);
        }
        p.d = bytes_of(lanes(&d));
        if m_of_d.is_none() {
            p.m = bytes_of(lanes(&m));
        }
        Some(p)
    }

    #[allow(clippy::too_many_arguments)]
    fn pack_block(
        g: usize,
        b: usize,
        cols: usize,
        bk: usize,
        nib: bool,
        high: usize,
        u: &[u8],
        out: &mut [u8],
    ) {
        let at = |j: usize, c: usize, t: usize| u[(g * GROUP + j) * cols + b * bk + 4 * c + t];
        for j in 0..GROUP {
            for t in 0..4 {
                if nib {
                    for c in 0..bk / 8 {
                        let lo = at(j, c, t) & 0xF;
                        out[c * CHUNK + 4 * j + t] = lo | ((at(j, c + bk / 8, t) & 0xF) << 4);
                    }
                    if high > 0 {
                        let plane = &mut out[bk / 8 * CHUNK..];
                        for c in 0..bk / 4 {
                            plane[4 * j + t] |= (at(j, c, t) >> 4) << (high * c);
                        }
                    }
                } else {
                    for c in 0..bk / 4 {
                        out[c * CHUNK + 4 * j + t] = at(j, c, t);
                    }
                }
            }
        }
    }

    /// `y[i * stride + r] = x_i · W_r` for every activation row i and every weight row r
    /// of `part`, at the current SIMD level.
    ///
    /// # Safety
    /// `y` must be valid for writes at those indices, and no other thread may write them.
    pub unsafe fn matmul_groups(&self, a: &QuantActs, part: Part, y: *mut f32, stride: usize) {
        // SAFETY: forwarded.
        unsafe { self.matmul_groups_at(Simd::current(), a, part, y, stride) }
    }

    /// As `matmul_groups`, at a given level (which must not exceed `Simd::detected()`).
    ///
    /// # Safety
    /// As `matmul_groups`.
    pub unsafe fn matmul_groups_at(
        &self,
        level: Simd,
        a: &QuantActs,
        part: Part,
        y: *mut f32,
        stride: usize,
    ) {
        assert!(
            part.groups.end <= self.groups()
                && part.rows.end <= a.n
                && a.cols == self.cols
                && a.q.len() == a.n * a.cols,
            "matmul shapes"
        );
        assert!(
            level as u8 <= Simd::detected() as u8,
            "{level:?} is not available on this CPU"
        );
        #[cfg(target_arch = "x86_64")]
        let fold = fold512(self);
        match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the level's features are present (asserted); the caller's contract
            // covers `y`.
            Simd::Avx512 if !self.signed && (self.m_of_d.is_none() || fold.is_some()) => unsafe {
                crate::x86::avx512::packed_groups(self, a, part, y, stride, fold)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above (an AVX-512 CPU has AVX2). Offsets derived from the scales
            // that the AVX-512 kernel cannot fold (none of today's formats) run here.
            Simd::Avx512 => unsafe {
                crate::x86::avx2::vnni::packed_groups(self, a, part, y, stride)
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Simd::Avx2 => unsafe {
                crate::x86::avx2::vnni::packed_groups(self, a, part, y, stride)
            },
            // SAFETY: the caller's contract covers `y`.
            _ => unsafe { crate::packed_portable::groups(self, a, part, y, stride) },
        }
    }
}

/// The `FOLDS` entry of a derived offset `-2^s·d` that the AVX-512 kernel
/// takes inside its 32-bit integer sums (any such offset fits there: `|u - 2^s| ≤ 2^s`
/// and `bk · 2^s · 127 < 2^31`); `None` when the offset is stored or is not of that form.
pub(crate) fn fold512(p: &PackedMatrix) -> Option<usize> {
    let k = p.m_of_d?;
    FOLDS
        .iter()
        .position(|&(bk, s)| bk == p.bk && k == -((1u32 << s) as f32))
}

/// A matrix's K-quant scales factored (`formats::k_factors`), by row: `[row][block]`
/// integers and `[row][super-block]` f16-exact scales.
struct Factors {
    per: usize,
    dsub: Scratch<i8>,
    msub: Scratch<i8>,
    dsup: Scratch<f32>,
    msup: Scratch<f32>,
}

impl Factors {
    /// The factors of a matrix whose decoded scales are `d` and stored offsets `m`
    /// (`[row][block]`, `padded` rows; `None` when derived from the scales), if its format
    /// has them and they give every value exactly.
    fn of(
        dtype: GgmlDType,
        bytes: &[u8],
        rows: usize,
        row_bytes: usize,
        padded: usize,
        d: &[f32],
        m: Option<&[f32]>,
    ) -> Option<Self> {
        let f = Format::of(dtype)?;
        let per = f.block_weights / f.bk;
        let nb = d.len() / padded;
        let supers = nb / per;
        let mut fs = Self {
            per,
            dsub: Scratch::zeroed(padded * nb),
            msub: Scratch::zeroed(padded * nb),
            dsup: Scratch::zeroed(padded * supers),
            msup: Scratch::zeroed(padded * supers),
        };
        for r in 0..rows {
            k_factors(
                dtype,
                &bytes[r * row_bytes..(r + 1) * row_bytes],
                &mut fs.dsup[r * supers..(r + 1) * supers],
                &mut fs.msup[r * supers..(r + 1) * supers],
                &mut fs.dsub[r * nb..(r + 1) * nb],
                &mut fs.msub[r * nb..(r + 1) * nb],
            )?;
        }
        let exact = (0..padded * nb).all(|i| {
            let s = i / nb * supers + i % nb / per;
            let f16_exact = |v: f32| f16::from_f32(v).to_f32() == v;
            fs.dsub[i] as f32 * fs.dsup[s] == d[i]
                && f16_exact(fs.dsup[s])
                && m.is_none_or(|m| fs.msub[i] as f32 * fs.msup[s] == m[i] && f16_exact(fs.msup[s]))
        });
        exact.then_some(fs)
    }

    /// `[group][block][16 lanes]` bytes of per-block integers.
    fn sub_lanes(&self, v: &[i8], groups: usize, nb: usize) -> HugeBytes {
        let mut out = HugeBytes::zeroed(groups * nb * GROUP);
        for g in 0..groups {
            for b in 0..nb {
                for j in 0..GROUP {
                    out[(g * nb + b) * GROUP + j] = v[(g * GROUP + j) * nb + b] as u8;
                }
            }
        }
        out
    }

    /// `[group][super-block][16 lanes]` f16 bytes of per-super-block scales.
    fn sup_lanes(&self, v: &[f32], groups: usize, supers: usize) -> HugeBytes {
        let mut out = HugeBytes::zeroed(groups * supers * GROUP * 2);
        for g in 0..groups {
            for s in 0..supers {
                for j in 0..GROUP {
                    let x = f16::from_f32(v[(g * GROUP + j) * supers + s]);
                    let at = ((g * supers + s) * GROUP + j) * 2;
                    out[at..at + 2].copy_from_slice(&x.to_le_bytes());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
