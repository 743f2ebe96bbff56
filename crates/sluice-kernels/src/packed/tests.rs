//! Tests of `packed.rs`: every format against candle's dequantisation, every level.

use candle_core::quantized::k_quants::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
};

use super::*;
use crate::simd::noise;

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
    let bytes =
        unsafe { std::slice::from_raw_parts(blocks.as_ptr() as *const u8, blocks.len() * size) }
            .to_vec();
    (bytes, deq)
}

/// Both layouts of `dtype` (compact, and a byte per quant as batch copies are) against
/// candle and the f64 definition at `level`, and against each other: the same bits.
fn check(level: Simd, dtype: GgmlDType, bytes: &[u8], deq: &[f32], rows: usize, cols: usize) {
    let ys: Vec<Vec<Vec<f32>>> = [true, false]
        .into_iter()
        .map(|compact| {
            let p = PackedMatrix::with_layout(dtype, bytes, rows, cols, compact).expect("fast");
            check_layout(level, dtype, &p, deq)
        })
        .collect();
    assert!(
        ys[0] == ys[1],
        "{dtype:?} {level:?}: the layouts give different numbers"
    );
}

/// Returns the outputs of every batch size tried.
fn check_layout(level: Simd, dtype: GgmlDType, p: &PackedMatrix, deq: &[f32]) -> Vec<Vec<f32>> {
    let (rows, cols) = (p.rows(), p.cols());
    let mut outputs = Vec::new();
    let mut row = vec![0f32; cols];
    for r in 0..rows {
        p.row(r, &mut row);
        for (c, (a, b)) in row.iter().zip(&deq[r * cols..]).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                "{dtype:?} row {r} col {c}: {a} vs candle {b}"
            );
        }
    }
    for n in [1, 2, 3, 4, 5, 6, 7, 9, 17] {
        let x = noise(n * cols, 7 + n as u32);
        let acts = QuantActs::new(&x, n, cols);
        // Plain f64 references: the packed weights against the int8 activations
        // (what the kernels compute), and against the f32 activations with the bound
        // of the activations' rounding error.
        let mut exact = Vec::new();
        let mut true_y = Vec::new();
        let mut bound = Vec::new();
        for i in 0..n {
            for r in 0..rows {
                p.row(r, &mut row);
                let (mut e, mut t, mut bd) = (0f64, 0f64, 0f64);
                for (c, w) in row.iter().enumerate() {
                    let k = i * cols + c;
                    let da = acts.d[k / 32] as f64;
                    e += *w as f64 * acts.q[k] as f64 * da;
                    t += *w as f64 * x[k] as f64;
                    bd += (*w as f64).abs() * da / 2.0;
                }
                exact.push(e);
                true_y.push(t);
                bound.push(bd);
            }
        }
        {
            let mut y = vec![f32::NAN; n * rows];
            // SAFETY: y has n * rows elements and this thread alone writes them.
            unsafe {
                p.matmul_groups_at(
                    level,
                    &acts,
                    Part {
                        groups: 0..p.groups(),
                        rows: 0..acts.n,
                    },
                    y.as_mut_ptr(),
                    rows,
                )
            };
            for k in 0..n * rows {
                let got = y[k] as f64;
                assert!(
                    (got - exact[k]).abs() < 1e-4 * (1.0 + exact[k].abs()),
                    "{dtype:?} {level:?} n={n} [{k}]: {got} vs {}",
                    exact[k]
                );
                assert!(
                    (got - true_y[k]).abs() <= bound[k] + 1e-4,
                    "{dtype:?} {level:?} n={n} [{k}]: {got} vs f32 {}",
                    true_y[k]
                );
            }
            // Batch invariance: each row alone is bit-identical to that row in the batch
            // (from 8 rows on, the AVX-512 kernel takes whole tiles of 8 and the rest
            // alone).
            for i in 0..n {
                let one = QuantActs::new(&x[i * cols..(i + 1) * cols], 1, cols);
                let mut y1 = vec![0f32; rows];
                // SAFETY: as above.
                unsafe {
                    p.matmul_groups_at(
                        level,
                        &one,
                        Part {
                            groups: 0..p.groups(),
                            rows: 0..one.n,
                        },
                        y1.as_mut_ptr(),
                        rows,
                    )
                };
                assert_eq!(
                    y1,
                    y[i * rows..(i + 1) * rows],
                    "{dtype:?} {level:?} n={n}: batch changes row {i}"
                );
            }
            outputs.push(y);
        }
    }
    outputs
}

crate::level_tests!(every_format_matches_candle_on_every_level);

fn every_format_matches_candle_on_every_level(level: Simd) {
    // 37 rows: two full groups and a padded one.
    let (rows, cols) = (37, 512);
    macro_rules! case {
        ($t:ty, $d:expr) => {{
            let (b, deq) = quantised::<$t>(rows, cols);
            check(level, $d, &b, &deq, rows, cols);
        }};
    }
    case!(BlockQ4_0, GgmlDType::Q4_0);
    case!(BlockQ4_1, GgmlDType::Q4_1);
    case!(BlockQ5_0, GgmlDType::Q5_0);
    case!(BlockQ5_1, GgmlDType::Q5_1);
    case!(BlockQ8_0, GgmlDType::Q8_0);
    case!(BlockQ4K, GgmlDType::Q4K);
    case!(BlockQ5K, GgmlDType::Q5K);
    case!(BlockQ6K, GgmlDType::Q6K);
    assert!(PackedMatrix::new(GgmlDType::F16, &[0; 64], 1, 32).is_none());
}

#[test]
fn legacy_scales_stay_f16_and_k_quant_scales_stay_factored() {
    let (b, _) = quantised::<BlockQ4_1>(16, 64);
    let p = PackedMatrix::new(GgmlDType::Q4_1, &b, 16, 64).expect("q4_1");
    assert!(p.half && p.factored == 0);
    // As the file keeps them: an i8 per row and block of 32 (16), an f16 per row and
    // super-block of 256, for the scales and (Q4_K) the offsets.
    let (b, _) = quantised::<BlockQ4K>(16, 512);
    let p = PackedMatrix::new(GgmlDType::Q4K, &b, 16, 512).expect("q4_k");
    assert_eq!(p.factored, 8);
    assert_eq!((p.d.len(), p.m.len()), (16 * 16, 16 * 16));
    assert_eq!((p.dsup.len(), p.msup.len()), (16 * 2 * 2, 16 * 2 * 2));
    let (b, _) = quantised::<BlockQ6K>(16, 256);
    let p = PackedMatrix::new(GgmlDType::Q6K, &b, 16, 256).expect("q6_k");
    assert_eq!(p.factored, 16);
    assert_eq!((p.d.len(), p.m.len(), p.dsup.len()), (16 * 16, 0, 16 * 2));
    // Bytes a decode token reads per weight: the file's 6.5625 bits for Q6_K.
    let bits = (p.qs.len() + p.d.len() + p.dsup.len()) as f64 * 8.0 / (16.0 * 256.0);
    assert_eq!(bits, 6.5625);
}

crate::level_tests!(largest_quants_against_largest_activations_stay_exact);

/// Every quant at its largest (and, for offsets taken in the integer sum, its smallest)
/// against activations at ±127: the kernels' 16-bit partial sums (`x86::avx2::matmul::run16`
/// and `tile`) must not overflow, so each level still gives the exact sum.
fn largest_quants_against_largest_activations_stay_exact(level: Simd) {
    let (rows, cols) = (16, 256);
    for (dtype, fill) in [
        (GgmlDType::Q4_0, 0xFF),
        (GgmlDType::Q4_1, 0xFF),
        (GgmlDType::Q5_0, 0xFF),
        (GgmlDType::Q5_1, 0xFF),
        (GgmlDType::Q8_0, 0x80),
        (GgmlDType::Q8_0, 0x7F),
        (GgmlDType::Q4K, 0xFF),
        (GgmlDType::Q5K, 0xFF),
        (GgmlDType::Q6K, 0xFF),
        // The smallest quants: `u - 2^s` at its largest magnitude where the offset is
        // taken inside the integer sum (`layout::folded_shift`).
        (GgmlDType::Q4_0, 0x00),
        (GgmlDType::Q5_0, 0x00),
        (GgmlDType::Q6K, 0x00),
    ] {
        let f = crate::formats::Format::of(dtype).expect("format");
        let mut block = vec![fill; f.block_bytes];
        // Scales of 1/64 (f16 0x2400) where the format keeps them; quants stay at `fill`.
        let one = [0x00u8, 0x24];
        match dtype {
            GgmlDType::Q6K => {
                block[208..210].copy_from_slice(&one);
                // Sub-block scales of 1 where the fill would make them 0.
                if fill == 0 {
                    block[192..208].fill(1);
                }
            }
            GgmlDType::Q4K | GgmlDType::Q5K => {
                block[0..2].copy_from_slice(&one);
                block[2..4].copy_from_slice(&one);
            }
            GgmlDType::Q4_1 | GgmlDType::Q5_1 => {
                block[0..2].copy_from_slice(&one);
                block[2..4].copy_from_slice(&one);
            }
            _ => block[0..2].copy_from_slice(&one),
        }
        let bytes = block.repeat(rows * cols / f.block_weights);
        for (compact, sign) in [(true, 1.0f32), (true, -1.0), (false, 1.0), (false, -1.0)] {
            let p = PackedMatrix::with_layout(dtype, &bytes, rows, cols, compact).expect("fast");
            let x = vec![sign; cols];
            let acts = QuantActs::new(&x, 1, cols);
            assert!(acts.q.iter().all(|q| q.unsigned_abs() == 127));
            let mut row = vec![0f32; cols];
            let exact: Vec<f64> = (0..rows)
                .map(|r| {
                    p.row(r, &mut row);
                    row.iter()
                        .enumerate()
                        .map(|(c, w)| *w as f64 * acts.q[c] as f64 * acts.d[c / 32] as f64)
                        .sum()
                })
                .collect();
            {
                let mut y = vec![f32::NAN; rows];
                // SAFETY: y has `rows` elements and this thread alone writes them.
                unsafe {
                    p.matmul_groups_at(
                        level,
                        &acts,
                        Part {
                            groups: 0..1,
                            rows: 0..acts.n,
                        },
                        y.as_mut_ptr(),
                        rows,
                    )
                };
                for (r, (got, want)) in y.iter().zip(&exact).enumerate() {
                    assert!(
                        (*got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{dtype:?} fill {fill:#x} {level:?} compact {compact} x={sign} row {r}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

/// A long batch is split into tasks by weight groups and by activation rows
/// (`tasks::SPLIT_ROWS`); every row must still come out with the bits it has alone, for
/// row counts that split evenly, unevenly and not at all.
#[test]
fn a_long_batch_split_by_rows_gives_each_row_its_bits_alone() {
    let (rows, cols) = (80, 256);
    let (bytes, _) = quantised::<BlockQ5_0>(rows, cols);
    let w = crate::QLinear::new(GgmlDType::Q5_0, &bytes, rows, cols).expect("a matrix");
    for n in [95, 96, 150, 301] {
        let x = noise(n * cols, n as u32);
        let mut y = vec![f32::NAN; n * rows];
        w.matmul(&x, n, &mut y);
        for (i, (xi, yi)) in x.chunks_exact(cols).zip(y.chunks_exact(rows)).enumerate() {
            let mut alone = vec![f32::NAN; rows];
            w.matmul(xi, 1, &mut alone);
            let same = alone
                .iter()
                .zip(yi)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{n} rows: row {i} differs from the row alone");
        }
    }
}

/// The one-row loops compiled for their prefetch hint and scale storage give the general
/// loop's bits at `level`, for every format: decode rows (prefetching), the lone rows of
/// a larger batch (not), and a part of one row of a batch.
fn one_row_loops_match(level: Simd) {
    assert!(
        level as u8 <= Simd::detected() as u8,
        "built for {level:?}, but this CPU lacks it"
    );
    let (rows, cols) = (37, 512);
    let run = |p: &PackedMatrix, acts: &QuantActs, part: std::ops::Range<usize>, fixed: bool| {
        crate::layout::set_specialised(fixed);
        let mut y = vec![f32::NAN; acts.n * rows];
        // SAFETY: y has n * rows elements and this thread alone writes them.
        unsafe {
            p.matmul_groups_at(
                level,
                acts,
                Part {
                    groups: 0..p.groups(),
                    rows: part,
                },
                y.as_mut_ptr(),
                rows,
            )
        };
        crate::layout::set_specialised(true);
        y.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    };
    macro_rules! case {
        ($t:ty, $d:expr) => {{
            let (b, _) = quantised::<$t>(rows, cols);
            let p = PackedMatrix::new($d, &b, rows, cols).expect("packed");
            // 1 and 3 rows prefetch; 5, 6 and 9 rows do not (AVX2 tiles of 4 leave 5's
            // last row alone), nor does one row of 9 taken as its own part.
            for n in [1, 3, 5, 6, 9] {
                let acts = QuantActs::new(&noise(n * cols, 3 + n as u32), n, cols);
                let mut parts = vec![0..n];
                if n == 9 {
                    parts.push(4..5);
                }
                for part in parts {
                    assert_eq!(
                        run(&p, &acts, part.clone(), true),
                        run(&p, &acts, part.clone(), false),
                        "{:?} n={n} rows {part:?}",
                        $d
                    );
                }
            }
        }};
    }
    case!(BlockQ4_0, GgmlDType::Q4_0);
    case!(BlockQ4_1, GgmlDType::Q4_1);
    case!(BlockQ5_0, GgmlDType::Q5_0);
    case!(BlockQ5_1, GgmlDType::Q5_1);
    case!(BlockQ8_0, GgmlDType::Q8_0);
    case!(BlockQ4K, GgmlDType::Q4K);
    case!(BlockQ5K, GgmlDType::Q5K);
    case!(BlockQ6K, GgmlDType::Q6K);
}

/// `x86/avx512/matmul/lone.rs`.
#[test]
#[cfg_attr(not(cpu_avx512), ignore = "this CPU lacks AVX-512 (F, BW, VNNI)")]
fn the_one_row_loops_compiled_for_their_case_give_the_general_loops_bits() {
    one_row_loops_match(Simd::Avx512);
}

/// One-row `tile`s of `x86/avx2/matmul.rs`.
#[test]
#[cfg_attr(not(cpu_avx2), ignore = "this CPU lacks AVX2 with FMA and F16C")]
fn the_avx2_one_row_tiles_compiled_for_their_case_give_the_general_tiles_bits() {
    one_row_loops_match(Simd::Avx2);
}
