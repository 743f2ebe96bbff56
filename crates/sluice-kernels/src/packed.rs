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
//! the compact form goes to the AVX2 kernel (decode: 15-25% less time per SmolLM2 Q4_K_M
//! token than the byte form under the AVX-512 kernel) and the byte copy to the AVX-512
//! one; both give a row the same bits. Scales and
//! offsets are stored per group and block as 16 lanes, in f16 when that is exact (the
//! legacy formats) and f32 otherwise; where the offset is a fixed multiple of the scale
//! (Q4_0, Q5_0, Q6_K, Q8_0) it is not stored but derived.
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

use crate::acts::QuantActs;
use crate::formats::{Format, decode_row};
use crate::simd::Simd;

/// Rows per group.
pub const GROUP: usize = 16;
/// Bytes per chunk (16 rows x 4 quants).
const CHUNK: usize = 64;

/// The share of one matmul that one task computes: the weight rows of groups `groups`
/// against activation rows `rows`.
#[derive(Clone, Debug)]
pub struct Part {
    /// Groups of `GROUP` weight rows.
    pub groups: std::ops::Range<usize>,
    /// Activation rows.
    pub rows: std::ops::Range<usize>,
}

/// A weight matrix in the grouped layout.
pub struct PackedMatrix {
    rows: usize,
    cols: usize,
    /// Columns per block.
    pub(crate) bk: usize,
    /// Two quants per byte.
    pub(crate) nibbles: bool,
    /// Quants may exceed 63 (only the AVX2 path cares).
    pub(crate) wide: bool,
    /// Quants are signed bytes and the offsets zero: Q8_0 packed for AVX2 and the
    /// portable path, where `|w| · (x · sign w)` needs one `vpmaddubsw` per chunk instead
    /// of two. (AVX-512 packs Q8_0 as `q + 128` for `vpdpbusd`.)
    pub(crate) signed: bool,
    /// Bits of the largest quant (4, 5, 6 or 8): how many chunks' pair sums the AVX2
    /// kernel can add in 16 bits, and with `nibbles`, how many bits above the nibble the
    /// high plane keeps (`high`).
    pub(crate) bits: u32,
    /// The offset as a fixed multiple of the scale (`m = k·d`), not stored.
    pub(crate) m_of_d: Option<f32>,
    /// Scales stored as f16 (else f32).
    pub(crate) half: bool,
    qs: Vec<u8>,
    d: Vec<u8>,
    m: Vec<u8>,
}

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
        let mut u = vec![0u8; groups * GROUP * cols];
        let mut d = vec![0f32; groups * GROUP * nb];
        let mut m = vec![0f32; groups * GROUP * nb];
        u.par_chunks_mut(cols)
            .zip(d.par_chunks_mut(nb).zip(m.par_chunks_mut(nb)))
            .take(rows)
            .enumerate()
            .for_each(|(r, (u, (d, m)))| {
                decode_row(dtype, &bytes[r * row_bytes..(r + 1) * row_bytes], u, d, m)
            });
        let signed = dtype == GgmlDType::Q8_0 && Simd::current() != Simd::Avx512;
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
        let m_of_d = k.filter(|k| m.iter().zip(&d).all(|(m, d)| *m == k * d));
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
            qs: vec![0; groups * nb * Self::quant_bytes(f.bk, nibbles, high)],
            d: Vec::new(),
            m: Vec::new(),
        };
        let qb = p.block_quant_bytes();
        p.qs.par_chunks_mut(qb).enumerate().for_each(|(i, out)| {
            Self::pack_block(i / nb, i % nb, cols, f.bk, nibbles, high, &u, out)
        });
        // Scales: [group][block][16 lanes].
        let lanes = |v: &[f32]| -> Vec<f32> {
            let mut out = vec![0f32; groups * nb * GROUP];
            for g in 0..groups {
                for b in 0..nb {
                    for j in 0..GROUP {
                        out[(g * nb + b) * GROUP + j] = v[(g * GROUP + j) * nb + b];
                    }
                }
            }
            out
        };
        let bytes_of = |v: Vec<f32>| -> Vec<u8> {
            if half {
                v.iter()
                    .flat_map(|x| f16::from_f32(*x).to_le_bytes())
                    .collect()
            } else {
                v.iter().flat_map(|x| x.to_le_bytes()).collect()
            }
        };
        p.d = bytes_of(lanes(&d));
        if m_of_d.is_none() {
            p.m = bytes_of(lanes(&m));
        }
        Some(p)
    }

    fn quant_bytes(bk: usize, nibbles: bool, high: usize) -> usize {
        let chunks = bk / 4;
        let planes = if high > 0 { CHUNK } else { 0 };
        if nibbles {
            chunks / 2 * CHUNK + planes
        } else {
            chunks * CHUNK
        }
    }

    /// Quant bytes of one (group, block).
    pub(crate) fn block_quant_bytes(&self) -> usize {
        Self::quant_bytes(self.bk, self.nibbles, self.high())
    }

    /// Bits above the nibble kept in the high plane (0, 1 or 2).
    pub(crate) fn high(&self) -> usize {
        high_bits(self.nibbles, self.bits)
    }

    /// Offset of the high plane inside a block's quant bytes.
    pub(crate) fn high_plane(&self) -> usize {
        self.bk / 8 * CHUNK
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

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row groups.
    pub fn groups(&self) -> usize {
        self.rows.div_ceil(GROUP)
    }

    /// Blocks per row.
    pub(crate) fn blocks(&self) -> usize {
        self.cols / self.bk
    }

    /// Quants of (group, block).
    #[inline(always)]
    pub(crate) fn quants(&self, g: usize, b: usize) -> *const u8 {
        self.block(g, b).as_ptr()
    }

    /// Scales and offsets of (group, block): 16 lanes each, f16 or f32 (`half`). The
    /// offsets' pointer is null when they are derived (`m_of_d`).
    #[inline(always)]
    pub(crate) fn scales(&self, g: usize, b: usize) -> (*const u8, *const u8) {
        let size = GROUP * if self.half { 2 } else { 4 };
        let i = (g * self.blocks() + b) * size;
        let m = if self.m_of_d.is_some() {
            std::ptr::null()
        } else {
            self.m[i..i + size].as_ptr()
        };
        (self.d[i..i + size].as_ptr(), m)
    }

    /// The scale of row `j` of (group, block).
    pub(crate) fn scale_of(&self, g: usize, b: usize, j: usize) -> f32 {
        self.scale_at(&self.d, g, b, j)
    }

    /// The offset of row `j` of (group, block).
    pub(crate) fn offset_at(&self, g: usize, b: usize, j: usize) -> f32 {
        match self.m_of_d {
            Some(k) => k * self.scale_at(&self.d, g, b, j),
            None => self.scale_at(&self.m, g, b, j),
        }
    }

    fn scale_at(&self, v: &[u8], g: usize, b: usize, j: usize) -> f32 {
        let i = (g * self.blocks() + b) * GROUP + j;
        if self.half {
            f16::from_le_bytes([v[2 * i], v[2 * i + 1]]).to_f32()
        } else {
            f32::from_le_bytes(v[4 * i..4 * i + 4].try_into().expect("4 bytes"))
        }
    }

    /// A stored quant as the integer it stands for.
    #[inline(always)]
    pub(crate) fn value(&self, q: u8) -> i32 {
        if self.signed {
            q as i8 as i32
        } else {
            q as i32
        }
    }

    /// The quant bytes of (group, block).
    #[inline(always)]
    fn block(&self, g: usize, b: usize) -> &[u8] {
        let qb = self.block_quant_bytes();
        &self.qs[(g * self.blocks() + b) * qb..][..qb]
    }

    /// Quant `t` of row `j` in a block's quant bytes `q`.
    #[inline(always)]
    fn quant_in(&self, q: &[u8], j: usize, t: usize) -> u8 {
        let (c, tt) = (t / 4, t % 4);
        if !self.nibbles {
            return q[c * CHUNK + 4 * j + tt];
        }
        let half = self.bk / 8;
        let byte = q[(c % half) * CHUNK + 4 * j + tt];
        let lo = if c < half { byte & 0xF } else { byte >> 4 };
        let high = self.high();
        if high == 0 {
            return lo;
        }
        let mask = (1u8 << high) - 1;
        lo | (((q[self.high_plane() + 4 * j + tt] >> (high * c)) & mask) << 4)
    }

    /// All quants of (group, block) as `u[row * bk + t]`.
    pub(crate) fn unpack(&self, g: usize, b: usize, u: &mut [u8]) {
        let q = self.block(g, b);
        let bk = self.bk;
        for j in 0..GROUP {
            for t in 0..bk {
                u[j * bk + t] = self.quant_in(q, j, t);
            }
        }
    }

    /// Row `r` as f32 (`w = d * u + m`).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        let (g, j) = (r / GROUP, r % GROUP);
        for b in 0..self.blocks() {
            let d = self.scale_at(&self.d, g, b, j);
            let m = self.offset_at(g, b, j);
            let q = self.block(g, b);
            for t in 0..self.bk {
                out[b * self.bk + t] = d * self.value(self.quant_in(q, j, t)) as f32 + m;
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
            Simd::Avx512
                if !self.signed
                    && self.high() == 0
                    && (self.m_of_d.is_none() || fold.is_some()) =>
            unsafe { crate::avx512_matmul::packed_groups(self, a, part, y, stride, fold) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above (an AVX-512 CPU has AVX2). Compact 5- and 6-bit matrices
            // (decode) run here.
            Simd::Avx512 => unsafe { crate::avx2_matmul::packed_groups(self, a, part, y, stride) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Simd::Avx2 => unsafe { crate::avx2_matmul::packed_groups(self, a, part, y, stride) },
            // SAFETY: the caller's contract covers `y`.
            _ => unsafe { crate::packed_portable::groups(self, a, part, y, stride) },
        }
    }

    /// Writes the 16 lanes of group `g` for activation row `i` (rows past the end are
    /// padding and are dropped).
    ///
    /// # Safety
    /// As `matmul_groups`.
    #[inline(always)]
    pub(crate) unsafe fn store(
        &self,
        g: usize,
        i: usize,
        lanes: &[f32; GROUP],
        y: *mut f32,
        stride: usize,
    ) {
        let valid = (self.rows - g * GROUP).min(GROUP);
        for (j, v) in lanes.iter().take(valid).enumerate() {
            // SAFETY: in bounds and exclusive by the caller's contract.
            unsafe { *y.add(i * stride + g * GROUP + j) = *v };
        }
    }
}

/// `s` when the offset is `-2^s·d` and the kernels take it inside the integer sum; 0
/// otherwise. Such quants are `u` in `0..2^(s+1)`, so `|u - 2^s| ≤ 2^s`, and a 16-bit lane
/// of the AVX2 kernel, which sums `bk/2` products with activations of at most 127, stays
/// exact while `bk/2 · 2^s · 127 < 2^15`: Q4_0 (s = 3) and Q5_0 (4) in blocks of 32, Q6_K
/// (5) in blocks of 16.
pub(crate) fn folded_shift(p: &PackedMatrix) -> i32 {
    let s = p.bits as i32 - 1;
    let fits = p.bk * (1 << s) <= 512;
    match p.m_of_d {
        Some(k) if !p.signed && p.bits <= 6 && fits && k == -((1 << s) as f32) => s,
        _ => 0,
    }
}

/// The `acts_tiles::FOLDS` entry of a derived offset `-2^s·d` that the AVX-512 kernel
/// takes inside its 32-bit integer sums (any such offset fits there: `|u - 2^s| ≤ 2^s`
/// and `bk · 2^s · 127 < 2^31`); `None` when the offset is stored or is not of that form.
pub(crate) fn fold512(p: &PackedMatrix) -> Option<usize> {
    let k = p.m_of_d?;
    crate::acts_tiles::FOLDS
        .iter()
        .position(|&(bk, s)| bk == p.bk && k == -((1u32 << s) as f32))
}

/// Bits above the nibble in the high plane of quants of `bits` bits (none unless packed
/// as nibbles).
pub(crate) const fn high_bits(nibbles: bool, bits: u32) -> usize {
    if nibbles { bits as usize - 4 } else { 0 }
}

#[cfg(test)]
mod tests;
