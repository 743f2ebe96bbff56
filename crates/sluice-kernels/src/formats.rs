//! GGUF block formats decoded into one common form: unsigned integer quants `u` and, per
//! block of `bk` weights, a scale `d` and an offset `m`, so that every weight is
//! `w = d * u + m`.
//!
//! | type | bk | u | m |
//! |---|---|---|---|
//! | Q4_0 | 32 | 0..15 | -8d |
//! | Q4_1 | 32 | 0..15 | min |
//! | Q5_0 | 32 | 0..31 | -16d |
//! | Q5_1 | 32 | 0..31 | min |
//! | Q8_0 | 32 | q + 128 | -128d |
//! | Q4_K | 32 | 0..15 | -dmin * m_j (6-bit sub-block scales) |
//! | Q5_K | 32 | 0..31 | -dmin * m_j |
//! | Q6_K | 16 | 0..63 | -32d * s_j (8-bit sub-block scales) |

use candle_core::quantized::GgmlDType;
use half::f16;

/// How one GGUF type maps onto the common form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    /// Bytes of one GGUF block.
    pub block_bytes: usize,
    /// Weights in one GGUF block.
    pub block_weights: usize,
    /// Weights sharing one (d, m): 16 or 32.
    pub bk: usize,
    /// Largest quant value.
    pub max_u: u8,
}

impl Format {
    /// The fast-path form of `dtype`, if it has one.
    pub fn of(dtype: GgmlDType) -> Option<Format> {
        let f = |block_bytes, block_weights, bk, max_u| Format {
            block_bytes,
            block_weights,
            bk,
            max_u,
        };
        Some(match dtype {
            GgmlDType::Q4_0 => f(18, 32, 32, 15),
            GgmlDType::Q4_1 => f(20, 32, 32, 15),
            GgmlDType::Q5_0 => f(22, 32, 32, 31),
            GgmlDType::Q5_1 => f(24, 32, 32, 31),
            GgmlDType::Q8_0 => f(34, 32, 32, 255),
            GgmlDType::Q4K => f(144, 256, 32, 15),
            GgmlDType::Q5K => f(176, 256, 32, 31),
            GgmlDType::Q6K => f(210, 256, 16, 63),
            _ => return None,
        })
    }
}

fn h(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// ggml's packing of the 6-bit scale and min of sub-block `j` in K-quant blocks.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Decodes one row (`row` holds its GGUF blocks) into `u` (one per weight) and `d`, `m`
/// (one per `bk` weights).
pub fn decode_row(dtype: GgmlDType, row: &[u8], u: &mut [u8], d: &mut [f32], m: &mut [f32]) {
    let f = Format::of(dtype).expect("a fast-path format");
    let per = f.block_weights / f.bk;
    for (i, blk) in row.chunks_exact(f.block_bytes).enumerate() {
        let u = &mut u[i * f.block_weights..(i + 1) * f.block_weights];
        let (d, m) = (
            &mut d[i * per..(i + 1) * per],
            &mut m[i * per..(i + 1) * per],
        );
        match dtype {
            GgmlDType::Q4_0 | GgmlDType::Q4_1 => {
                let (scale, q) = (h(blk, 0), if dtype == GgmlDType::Q4_0 { 2 } else { 4 });
                d[0] = scale;
                m[0] = if q == 2 { -8.0 * scale } else { h(blk, 2) };
                for j in 0..16 {
                    u[j] = blk[q + j] & 0xF;
                    u[j + 16] = blk[q + j] >> 4;
                }
            }
            GgmlDType::Q5_0 | GgmlDType::Q5_1 => {
                let (scale, off) = (h(blk, 0), if dtype == GgmlDType::Q5_0 { 2 } else { 4 });
                d[0] = scale;
                m[0] = if off == 2 { -16.0 * scale } else { h(blk, 2) };
                let qh = u32::from_le_bytes(blk[off..off + 4].try_into().expect("4 bytes"));
                let qs = &blk[off + 4..];
                for j in 0..16 {
                    u[j] = (qs[j] & 0xF) | ((((qh >> j) << 4) & 0x10) as u8);
                    u[j + 16] = (qs[j] >> 4) | (((qh >> (j + 12)) & 0x10) as u8);
                }
            }
            GgmlDType::Q8_0 => {
                d[0] = h(blk, 0);
                m[0] = -128.0 * d[0];
                for j in 0..32 {
                    u[j] = (blk[2 + j] as i8 as i16 + 128) as u8;
                }
            }
            GgmlDType::Q4K | GgmlDType::Q5K => {
                let (dd, dmin, scales) = (h(blk, 0), h(blk, 2), &blk[4..16]);
                let five = dtype == GgmlDType::Q5K;
                let (qh, qs) = if five {
                    (&blk[16..48], &blk[48..176])
                } else {
                    (&blk[..0], &blk[16..144])
                };
                for j in 0..4 {
                    for s in 0..2 {
                        let (sc, mn) = scale_min_k4(2 * j + s, scales);
                        d[2 * j + s] = dd * sc as f32;
                        m[2 * j + s] = -(dmin * mn as f32);
                    }
                    for l in 0..32 {
                        let q = qs[32 * j + l];
                        let (mut lo, mut hi) = (q & 0xF, q >> 4);
                        if five {
                            lo |= ((qh[l] >> (2 * j)) & 1) << 4;
                            hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
                        }
                        u[64 * j + l] = lo;
                        u[64 * j + 32 + l] = hi;
                    }
                }
            }
            GgmlDType::Q6K => {
                let (ql, qh, sc, dd) = (&blk[..128], &blk[128..192], &blk[192..208], h(blk, 208));
                for (s, (d, m)) in d.iter_mut().zip(m.iter_mut()).enumerate() {
                    *d = dd * sc[s] as i8 as f32;
                    *m = -32.0 * *d;
                }
                for half in 0..2 {
                    let (ql, qh, u) = (&ql[64 * half..], &qh[32 * half..], &mut u[128 * half..]);
                    for l in 0..32 {
                        u[l] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
                        u[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
                        u[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                        u[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                    }
                }
            }
            other => unreachable!("{other:?} has no fast path"),
        }
    }
}

/// The K-quants' scales and offsets as the file keeps them: per GGUF block (a super-block
/// of `block_weights / bk` blocks) one f16 scale `dsup` and one f16 `msup` (-dmin), and
/// per block a small integer `dsub` (`msub`), so that `decode_row`'s `d = dsup · dsub`
/// and `m = msup · msub` exactly (an f16 times an integer below 2^8 fits an f32's
/// mantissa). `None` for the other formats. Fills one row's values.
pub fn k_factors(
    dtype: GgmlDType,
    row: &[u8],
    dsup: &mut [f32],
    msup: &mut [f32],
    dsub: &mut [i8],
    msub: &mut [i8],
) -> Option<()> {
    let f = Format::of(dtype)?;
    let per = f.block_weights / f.bk;
    for (i, blk) in row.chunks_exact(f.block_bytes).enumerate() {
        let (dsub, msub) = (
            &mut dsub[i * per..(i + 1) * per],
            &mut msub[i * per..(i + 1) * per],
        );
        match dtype {
            GgmlDType::Q4K | GgmlDType::Q5K => {
                dsup[i] = h(blk, 0);
                msup[i] = -h(blk, 2);
                for s in 0..per {
                    let (sc, mn) = scale_min_k4(s, &blk[4..16]);
                    dsub[s] = sc as i8;
                    msub[s] = mn as i8;
                }
            }
            GgmlDType::Q6K => {
                dsup[i] = h(blk, 208);
                msup[i] = 0.0;
                for s in 0..per {
                    dsub[s] = blk[192 + s] as i8;
                    msub[s] = 0;
                }
            }
            _ => return None,
        }
    }
    Some(())
}
