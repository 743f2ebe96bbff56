//! Activations quantised to int8 in blocks of 32 (llama.cpp's Q8_1 scheme), the right-hand
//! side of the integer matmul kernels.
//!
//! Each block of 32 values `x` becomes `q = round(x / d)` with `d = max|x| / 127`, and
//! the block sums `d * Σq` (over 32 and over each half of 16) that the weights' offsets
//! multiply. For offsets that are a fixed multiple of the scale, the integer kernels take
//! the offset inside the integer sum instead, from each block's *lane sums* (`l32`, `l16`:
//! `lane_sums`).

use crate::acts_tiles::{Rows, TilesOut};
use crate::layout::{ABLOCK, FOLDS, Out, QuantActs, TILE};
use crate::plain::quantise_block;
use crate::simd::Simd;
use crate::threads::Chunks;

impl QuantActs {
    /// Quantises `x` (`n x cols`, `cols` a multiple of 32) at the current SIMD level.
    pub fn new(x: &[f32], n: usize, cols: usize) -> Self {
        let mut a = Self::default();
        a.fill(x, n, cols);
        a
    }

    /// Re-quantises into the existing buffers.
    pub fn fill(&mut self, x: &[f32], n: usize, cols: usize) {
        assert!(
            cols.is_multiple_of(ABLOCK) && x.len() == n * cols,
            "activation shape"
        );
        self.n = n;
        self.cols = cols;
        self.q.resize(n * cols, 0);
        self.d.resize(n * cols / ABLOCK, 0.0);
        self.s32.resize(n * cols / ABLOCK, 0.0);
        self.s16.resize(n * cols / 16, 0.0);
        self.l32.resize(n * cols / ABLOCK, 0);
        self.l16.resize(n * cols / 16, 0);
        let level = Simd::current();
        // Large batches (prefill) are split across the compute threads, `rows` per task.
        let rows = if n >= 32 { 16 } else { n.max(1) };
        let nb = cols / ABLOCK;
        let q = Chunks::new(&mut self.q, rows * cols);
        let d = Chunks::new(&mut self.d, rows * nb);
        let s32 = Chunks::new(&mut self.s32, rows * nb);
        let s16 = Chunks::new(&mut self.s16, rows * nb * 2);
        let l32 = Chunks::new(&mut self.l32, rows * nb);
        let l16 = Chunks::new(&mut self.l16, rows * nb * 2);
        // Tiles: a task's rows are whole tiles but for the last task's.
        let tiled = level == Simd::Avx512 && n >= TILE;
        self.tiles.resize(if tiled { n / TILE } else { 0 }, cols);
        let per = (rows / TILE).max(1) * TILE;
        let t = &mut self.tiles;
        let tq = Chunks::new(&mut t.q, per * cols);
        let td = Chunks::new(&mut t.d, per * nb);
        let ts32 = Chunks::new(&mut t.s32, per * nb);
        let ts16 = Chunks::new(&mut t.s16, per * nb * 2);
        // (Untiled, as every decode step is, nothing to allocate.)
        let tz: Vec<Chunks<i32>> = if tiled {
            t.z.iter_mut()
                .zip(FOLDS)
                .map(|(z, (bk, _))| Chunks::new(z, per * cols / bk))
                .collect()
        } else {
            Vec::new()
        };
        crate::threads::for_each(n.div_ceil(rows), |i| {
            let x = &x[i * rows * cols..((i + 1) * rows * cols).min(x.len())];
            // SAFETY: task `i` is the only one that takes chunk `i` of each output.
            let mut out = unsafe {
                Out {
                    q: q.get(i),
                    d: d.get(i),
                    s32: s32.get(i),
                    s16: s16.get(i),
                }
            };
            match level {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Simd::current` only returns a level the CPU reports.
                Simd::Avx512 => unsafe { crate::x86::avx512::quantise(&mut out, x) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                Simd::Avx2 => unsafe { crate::x86::avx2::acts::quantise(&mut out, x) },
                _ => quantise(&mut out, x),
            }
            // SAFETY: as above.
            let (l32, l16) = unsafe { (l32.get(i), l16.get(i)) };
            match level {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Simd::current` only returns a level the CPU reports.
                Simd::Avx2 | Simd::Avx512 => unsafe {
                    crate::x86::avx2::acts::lane_sums(out.q, l32, l16)
                },
                _ => lane_sums(out.q, l32, l16),
            }
            if tiled {
                // SAFETY: as above.
                let t = unsafe {
                    TilesOut {
                        q: tq.get(i),
                        d: td.get(i),
                        s32: ts32.get(i),
                        s16: ts16.get(i),
                        z: std::array::from_fn(|k| tz[k].get(i)),
                    }
                };
                let rows = Rows {
                    q: out.q,
                    d: out.d,
                    s32: out.s32,
                    s16: out.s16,
                    l32,
                    l16,
                };
                crate::acts_tiles::build(t, rows, cols);
            }
        });
    }
}

/// The lane sums of quants `q` (whole blocks of 32), negated: for each block of 16 and of
/// 32 columns, `-Σ_c (q[4c] + q[4c + 1])` in the low 16 bits and `-Σ_c (q[4c + 2] +
/// q[4c + 3])` in the high 16 bits, over the block's groups of 4 columns `4c..4c + 4`. These are the
/// activations that the even and the odd 16-bit lane of a `vpmaddubsw` against a chunk of
/// packed weights (`packed.rs`) multiply, so a kernel starts a block's 16-bit sums at them
/// (shifted left by log2 of the offset) to take a derived offset `k·d` into the integer
/// sum. Each sum is at most 16 · 127 in magnitude. (The plain loop: `x86::avx2::acts` has
/// the AVX2 kernel.)
pub(crate) fn lane_sums(q: &[i8], l32: &mut [i32], l16: &mut [i32]) {
    let pack = |even: i32, odd: i32| ((-even) as u16 as u32 | ((-odd) as u16 as u32) << 16) as i32;
    for (b, qb) in q.chunks_exact(ABLOCK).enumerate() {
        let mut sums = [[0i32; 2]; 2];
        for (c, g) in qb.chunks_exact(4).enumerate() {
            let half = &mut sums[c / 4];
            half[0] += g[0] as i32 + g[1] as i32;
            half[1] += g[2] as i32 + g[3] as i32;
        }
        l16[2 * b] = pack(sums[0][0], sums[0][1]);
        l16[2 * b + 1] = pack(sums[1][0], sums[1][1]);
        l32[b] = pack(sums[0][0] + sums[1][0], sums[0][1] + sums[1][1]);
    }
}

/// Plain loops (the definition the AVX2 and AVX-512 paths follow).
#[inline(always)]
pub(crate) fn quantise(a: &mut Out, x: &[f32]) {
    for (b, xb) in x.chunks_exact(ABLOCK).enumerate() {
        let sums = quantise_block(xb, a.block(b));
        a.put(b, sums);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::noise;

    #[test]
    fn every_level_quantises_alike() {
        let (n, cols) = (2, 256);
        let mut x = noise(n * cols, 6);
        // Blocks the vector paths must take as the plain loop does: all zero, exact
        // ties (scale 1), a NaN, an infinity, values whose scale's inverse overflows.
        x[32..64].fill(0.0);
        for (i, v) in x[64..96].iter_mut().enumerate() {
            *v = if i == 0 { 127.0 } else { i as f32 - 15.5 };
        }
        x[100] = f32::NAN;
        x[130] = f32::INFINITY;
        x[160..192].fill(1e-44);
        let fresh = || {
            (
                vec![0i8; n * cols],
                vec![0f32; n * cols / 32],
                vec![0f32; n * cols / 32],
                vec![0f32; n * cols / 16],
            )
        };
        let mut want = fresh();
        let (q, d, s32, s16) = &mut want;
        quantise(&mut Out { q, d, s32, s16 }, &x);
        #[cfg(target_arch = "x86_64")]
        if matches!(Simd::detected(), Simd::Avx2 | Simd::Avx512) {
            let mut got = fresh();
            let (q, d, s32, s16) = &mut got;
            // SAFETY: the CPU has AVX2 (checked above).
            unsafe { crate::x86::avx2::acts::quantise(&mut Out { q, d, s32, s16 }, &x) };
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
        #[cfg(target_arch = "x86_64")]
        if Simd::detected() == Simd::Avx512 {
            let mut got = fresh();
            let (q, d, s32, s16) = &mut got;
            // SAFETY: the CPU has AVX-512 (checked above).
            unsafe { crate::x86::avx512::quantise(&mut Out { q, d, s32, s16 }, &x) };
            // Compared as text, as above: a NaN sum is never equal to itself.
            assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
    }

    #[test]
    fn every_level_sums_lanes_alike() {
        let mut q: Vec<i8> = noise(256, 4).iter().map(|v| (v * 127.0) as i8).collect();
        q[..32].fill(127);
        q[32..64].fill(-127);
        let (mut want32, mut want16) = (vec![0; 8], vec![0; 16]);
        lane_sums(&q, &mut want32, &mut want16);
        assert_eq!(want32[0], pack(-16 * 127, -16 * 127));
        assert_eq!(want16[3], pack(8 * 127, 8 * 127));
        #[cfg(target_arch = "x86_64")]
        if matches!(Simd::detected(), Simd::Avx2 | Simd::Avx512) {
            let (mut got32, mut got16) = (vec![0; 8], vec![0; 16]);
            // SAFETY: the CPU has AVX2 (checked above).
            unsafe { crate::x86::avx2::acts::lane_sums(&q, &mut got32, &mut got16) };
            assert_eq!((got32, got16), (want32, want16));
        }
    }

    /// Two 16-bit lanes in one word, as `lane_sums` stores them.
    fn pack(low: i32, high: i32) -> i32 {
        (low as u16 as u32 | (high as u16 as u32) << 16) as i32
    }

    #[test]
    fn blocks_round_trip_within_half_a_step() {
        let (n, cols) = (3, 96);
        let mut x = noise(n * cols, 5);
        x[32..64].fill(0.0); // an all-zero block
        let a = QuantActs::new(&x, n, cols);
        for (i, v) in x.iter().enumerate() {
            let d = a.d[i / ABLOCK];
            let back = a.q[i] as f32 * d;
            assert!((back - v).abs() <= d / 2.0 + 1e-7, "[{i}] {v} -> {back}");
            assert!(a.q[i] >= -127, "never -128");
        }
        for b in 0..n * cols / ABLOCK {
            let s: i32 = a.q[b * 32..b * 32 + 32].iter().map(|&q| q as i32).sum();
            assert_eq!(a.s32[b], a.d[b] * s as f32);
            let halves = a.s16[2 * b] + a.s16[2 * b + 1];
            assert!((halves - a.s32[b]).abs() <= 1e-5 * (1.0 + a.s32[b].abs()));
            // Lane sums: columns 4c, 4c + 1 (low half) and 4c + 2, 4c + 3 (high half).
            let lanes = |from: usize, len: usize| {
                let sum = |t: usize| -> i32 {
                    (from..from + len)
                        .filter(|c| c % 4 / 2 == t)
                        .map(|c| a.q[c] as i32)
                        .sum()
                };
                (-sum(0)) as u16 as u32 | ((-sum(1)) as u16 as u32) << 16
            };
            assert_eq!(a.l32[b] as u32, lanes(b * 32, 32));
            assert_eq!(a.l16[2 * b] as u32, lanes(b * 32, 16));
            assert_eq!(a.l16[2 * b + 1] as u32, lanes(b * 32 + 16, 16));
        }
        assert_eq!(a.d[1], 0.0);
    }
}
