//! Tests of `vnni.rs`: the instruction's sums, and the AVX2 matmul giving the same bits
//! with `vpdpbusd` as without, for every format, layout and row count.

use std::arch::x86_64::*;

use candle_core::quantized::GgmlDType;
use candle_core::quantized::k_quants::{
    BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K, BlockQ8_0, GgmlType,
};

use super::dpbusd;
use crate::layout::{
    PackedMatrix, Part, QuantActs, VNNI_EVEX, VNNI_NONE, VNNI_VEX, force_avx2_vnni, vnni256,
};
use crate::simd::{Simd, noise};

/// The file bytes of random weights quantised by candle.
fn quantised<B: GgmlType>(rows: usize, cols: usize) -> Vec<u8> {
    let w = noise(rows * cols, 11);
    let mut blocks = vec![B::zeros(); rows * cols / B::BLCK_SIZE];
    B::from_float(&w, &mut blocks);
    let size = std::mem::size_of::<B>();
    // SAFETY: candle's blocks are plain `repr(C)` data; we read their bytes.
    unsafe { std::slice::from_raw_parts(blocks.as_ptr() as *const u8, blocks.len() * size) }
        .to_vec()
}

/// Every block of `dtype` filled with `fill` (largest or smallest quants), scales 1/64.
fn filled(dtype: GgmlDType, fill: u8, rows: usize, cols: usize) -> Vec<u8> {
    let f = crate::formats::Format::of(dtype).expect("format");
    let mut block = vec![fill; f.block_bytes];
    let one = [0x00u8, 0x24];
    match dtype {
        GgmlDType::Q6K => {
            block[208..210].copy_from_slice(&one);
            if fill == 0 {
                block[192..208].fill(1);
            }
        }
        GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q4_1 | GgmlDType::Q5_1 => {
            block[0..2].copy_from_slice(&one);
            block[2..4].copy_from_slice(&one);
        }
        _ => block[0..2].copy_from_slice(&one),
    }
    block.repeat(rows * cols / f.block_weights)
}

/// `(rows, cols)` of the matrices below: a last group of 5 rows, 16 blocks of 32.
const SHAPE: (usize, usize) = (37, 512);

/// Every matrix to compare: each format from random weights and at its extreme quants,
/// in both layouts (compact 5- and 6-bit quants or a byte each), Q8_0 packed both ways
/// (signed as for AVX2 CPUs, `q + 128` as for AVX-512 ones).
fn matrices() -> Vec<(String, PackedMatrix)> {
    let (rows, cols) = SHAPE;
    let mut sources: Vec<(GgmlDType, &str, Vec<u8>)> = vec![
        (
            GgmlDType::Q4_0,
            "random",
            quantised::<BlockQ4_0>(rows, cols),
        ),
        (
            GgmlDType::Q4_1,
            "random",
            quantised::<BlockQ4_1>(rows, cols),
        ),
        (
            GgmlDType::Q5_0,
            "random",
            quantised::<BlockQ5_0>(rows, cols),
        ),
        (
            GgmlDType::Q5_1,
            "random",
            quantised::<BlockQ5_1>(rows, cols),
        ),
        (
            GgmlDType::Q8_0,
            "random",
            quantised::<BlockQ8_0>(rows, cols),
        ),
        (GgmlDType::Q4K, "random", quantised::<BlockQ4K>(rows, cols)),
        (GgmlDType::Q5K, "random", quantised::<BlockQ5K>(rows, cols)),
        (GgmlDType::Q6K, "random", quantised::<BlockQ6K>(rows, cols)),
    ];
    for (dtype, fills) in [
        (GgmlDType::Q4_0, &[0xFF, 0x00][..]),
        (GgmlDType::Q4_1, &[0xFF]),
        (GgmlDType::Q5_0, &[0xFF, 0x00]),
        (GgmlDType::Q5_1, &[0xFF]),
        (GgmlDType::Q8_0, &[0x80, 0x7F]),
        (GgmlDType::Q4K, &[0xFF]),
        (GgmlDType::Q5K, &[0xFF]),
        (GgmlDType::Q6K, &[0xFF, 0x00]),
    ] {
        for &fill in fills {
            let name = if fill == 0 { "smallest" } else { "largest" };
            sources.push((dtype, name, filled(dtype, fill, rows, cols)));
        }
    }
    let mut out = Vec::new();
    for (dtype, name, bytes) in &sources {
        for compact in [true, false] {
            for signed in [true, false] {
                if (!compact && *dtype == GgmlDType::Q8_0) || (signed && *dtype != GgmlDType::Q8_0)
                {
                    continue;
                }
                let p = PackedMatrix::packed_as(*dtype, bytes, rows, cols, compact, signed)
                    .expect("packed");
                let label = format!("{dtype:?} {name} compact {compact} signed {signed}");
                out.push((label, p));
            }
        }
    }
    out
}

/// Each matrix's outputs at the AVX2 level for 1 to 9 activation rows (one-row loops, and
/// tiles of 2, 3 and 4), as bits, with the `vpdpbusd` form `v` in force; activations of
/// random values and at ±127.
fn outputs(v: u8, matrices: &[(String, PackedMatrix)]) -> Vec<(String, Vec<u32>)> {
    let (rows, cols) = SHAPE;
    force_avx2_vnni(v);
    assert_eq!(vnni256(), v);
    let mut out = Vec::new();
    for (label, p) in matrices {
        for n in [1, 2, 3, 4, 5, 7, 9] {
            let mut x = noise(n * cols, 5 + n as u32);
            if n == 2 {
                x[..cols].fill(1.0);
                x[cols..].fill(-1.0);
            }
            let acts = QuantActs::new(&x, n, cols);
            let mut y = vec![f32::NAN; n * rows];
            // SAFETY: y has n * rows elements and this thread alone writes them; the CPU
            // has AVX2 (the callers' `cpu_*` attributes).
            unsafe {
                p.matmul_groups_at(
                    Simd::Avx2,
                    &acts,
                    Part {
                        groups: 0..p.groups(),
                        rows: 0..n,
                    },
                    y.as_mut_ptr(),
                    rows,
                )
            };
            assert!(y.iter().all(|v| v.is_finite()), "{label} n={n}: {y:?}");
            out.push((
                format!("{label} n={n}"),
                y.iter().map(|v| v.to_bits()).collect(),
            ));
        }
    }
    out
}

/// The matmul with the form `v` against the one without, bit for bit; the form counted
/// as taken.
fn vnni_gives_the_same_bits(v: u8) {
    let matrices = matrices();
    let before = vnni256();
    let without = outputs(VNNI_NONE, &matrices);
    let taken = super::VNNI_CALLS.load(std::sync::atomic::Ordering::Relaxed);
    let with = outputs(v, &matrices);
    let after = super::VNNI_CALLS.load(std::sync::atomic::Ordering::Relaxed);
    force_avx2_vnni(before);
    assert!(
        after >= taken + with.len(),
        "the vpdpbusd kernel ran {} times for {} matmuls",
        after - taken,
        with.len()
    );
    for ((label, a), (_, b)) in without.iter().zip(&with) {
        assert_eq!(a, b, "{label}: vpdpbusd changes the numbers");
    }
}

/// The EVEX form (AVX-512 VNNI with VL), as an AVX-512 CPU runs it at the AVX2 level.
#[test]
#[cfg_attr(
    not(cpu_vnni256),
    ignore = "this CPU lacks AVX-512 VNNI with VL (the EVEX vpdpbusd)"
)]
fn the_evex_vpdpbusd_gives_the_avx2_bits() {
    assert!(
        std::is_x86_feature_detected!("avx512vnni") && std::is_x86_feature_detected!("avx512vl"),
        "built for AVX-512 VNNI with VL, but this CPU lacks it"
    );
    vnni_gives_the_same_bits(VNNI_EVEX);
}

/// The VEX form (AVX-VNNI), as the AVX2-only CPUs with it run.
#[test]
#[cfg_attr(
    not(cpu_avxvnni),
    ignore = "this CPU lacks AVX-VNNI (the VEX vpdpbusd)"
)]
fn the_vex_vpdpbusd_gives_the_avx2_bits() {
    assert!(
        std::is_x86_feature_detected!("avxvnni"),
        "built for AVX-VNNI, but this CPU lacks it"
    );
    vnni_gives_the_same_bits(VNNI_VEX);
}

/// The instruction itself: unsigned weights, signed activations, summed exactly into the
/// 32-bit lanes at their extremes.
#[test]
#[cfg_attr(
    not(cpu_vnni256),
    ignore = "this CPU lacks AVX-512 VNNI with VL (the EVEX vpdpbusd)"
)]
fn vpdpbusd_sums_four_products_a_lane() {
    let w: Vec<u8> = (0..32)
        .map(|i| [0u8, 1, 128, 255][i % 4] ^ (i as u8 & 0x70))
        .collect();
    let x: Vec<i8> = (0..32).map(|i| [-128i8, 127, -1, 3][(i / 4) % 4]).collect();
    let acc: Vec<i32> = (0..8)
        .map(|l| [i32::MIN / 2, -7, 0, 1 << 20][l % 4])
        .collect();
    let want: Vec<i32> = (0..8)
        .map(|l| {
            acc[l]
                + (0..4)
                    .map(|k| w[4 * l + k] as i32 * x[4 * l + k] as i32)
                    .sum::<i32>()
        })
        .collect();
    let mut got = [0i32; 8];
    // SAFETY: 32-byte loads and a store of arrays that size; the CPU has the EVEX form.
    unsafe {
        let r = dpbusd::<VNNI_EVEX>(
            _mm256_loadu_si256(acc.as_ptr() as *const __m256i),
            _mm256_loadu_si256(w.as_ptr() as *const __m256i),
            _mm256_loadu_si256(x.as_ptr() as *const __m256i),
        );
        _mm256_storeu_si256(got.as_mut_ptr() as *mut __m256i, r);
    }
    assert_eq!(got.to_vec(), want);
}
