//! Tests of `attention.rs`: every kernel against the f64 definition, a tile of rows against
//! each row alone, every level; keys and values read through a shuffled block table from a
//! pool of interleaved heads against the same sequence laid out contiguously
//! (`tests/paged.rs`), and long rows cut into parts (`tests/parts.rs`).

use half::f16;

use super::*;
use crate::layout::{ATTN_PART, KEY_BLOCK, PartStat, key_index};
use crate::simd::noise;

fn halves(v: Vec<f32>) -> Vec<f16> {
    v.into_iter().map(f16::from_f32).collect()
}

/// The identity table of a contiguous layout of `positions` positions.
fn identity(positions: usize) -> Vec<u32> {
    (0..positions.div_ceil(KEY_BLOCK) as u32).collect()
}

/// `attend_group`'s kernel at `level` for `a` as given (no cut).
fn group_at(level: Simd, a: &Attn, out: &mut [f32]) {
    kernel_at(
        level,
        a,
        out,
        &mut vec![PartStat::default(); a.q.len() / a.hd],
    );
}

/// The one-row kernel of `level` for `a`, which cuts it into its parts (`out`: parts x g
/// x hd, `stats`: parts x g).
fn kernel_at(level: Simd, a: &Attn, out: &mut [f32], stats: &mut [PartStat]) {
    let scores = &mut Vec::new();
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the level tests run only levels the CPU has.
        Simd::Avx512 if a.hd.is_multiple_of(16) && a.plain() => unsafe {
            crate::x86::avx512::attend(a, scores, out, stats)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 | Simd::Avx512 => unsafe { crate::x86::avx2::attend(a, scores, out, stats) },
        _ => attend_body(a, scores, out, stats, |x, y, acc| x * y + acc),
    }
}

/// The f64 definition over contiguous keys and values: softmax of the scaled scores over
/// `start..len`, then the weighted sum of the values (`g x hd`).
fn definition(
    q: &[f32],
    (keys, values): (&[f16], &[f16]),
    hd: usize,
    (start, len): (usize, usize),
    scale: f32,
) -> Vec<f64> {
    let g = q.len() / hd;
    let mut want = vec![0f64; g * hd];
    for h in 0..g {
        let s: Vec<f64> = (start..len)
            .map(|p| {
                (0..hd)
                    .map(|d| q[h * hd + d] as f64 * keys[key_index(hd, d, p)].to_f64())
                    .sum::<f64>()
                    * scale as f64
            })
            .collect();
        let max = s.iter().cloned().fold(f64::MIN, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        for (i, p) in (start..len).enumerate() {
            for d in 0..hd {
                want[h * hd + d] += e[i] / sum * values[p * hd + d].to_f64();
            }
        }
    }
    want
}

/// `attend_rows`'s kernel at `level`: that level's tile kernel where it takes the tile,
/// else each row alone (no cut).
fn rows_at(level: Simd, tile: &[Attn], out: &mut [f32]) {
    let (hd, per) = (tile[0].hd, out.len() / tile.len());
    let stats = &mut vec![PartStat::default(); out.len() / hd];
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the level tests run only levels the CPU has.
        Simd::Avx512
            if hd.is_multiple_of(16) && out.len() / hd <= crate::x86::avx512::rows::QUERIES =>
        unsafe { crate::x86::avx512::rows::attend_rows(tile, &mut Vec::new(), out, stats) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 | Simd::Avx512
            if hd.is_multiple_of(8) && out.len() / hd <= crate::x86::avx2::rows::QUERIES =>
        unsafe { crate::x86::avx2::rows::attend_rows(tile, &mut Vec::new(), out, stats) },
        _ => {
            for (a, o) in tile.iter().zip(out.chunks_mut(per)) {
                group_at(level, a, o);
            }
        }
    }
}

/// Rows (at least 2) of a tile of groups of `g` heads at `level`.
fn tile_rows(level: Simd, g: usize) -> usize {
    let queries = match level {
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => crate::x86::avx512::rows::QUERIES,
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => crate::x86::avx2::rows::QUERIES,
        _ => 2,
    };
    (queries / g).max(2)
}

crate::level_tests!(attention_matches_f64_softmax_on_every_level);

fn attention_matches_f64_softmax_on_every_level(level: Simd) {
    for (hd, g, len) in [
        (64usize, 3usize, 37usize),
        (64, 5, 16),
        (128, 1, 3),
        (48, 2, 20),
    ] {
        let stride = len.next_multiple_of(16) + 16;
        let q = noise(g * hd, 11);
        let keys = halves(noise(hd * stride, 12));
        let values = halves(noise(stride * hd, 13));
        let scale = 0.125;
        let want = definition(&q, (&keys, &values), hd, (0, len), scale);
        let table = identity(stride);
        let a = Attn {
            q: &q,
            hd,
            keys: &keys,
            values: &values,
            table: &table,
            block_stride: hd * KEY_BLOCK,
            len,
            scale,
            start: 0,
            softcap: None,
        };
        let mut out = vec![f32::NAN; g * hd];
        group_at(level, &a, &mut out);
        for (a, b) in out.iter().zip(&want) {
            assert!(
                (*a as f64 - b).abs() < 1e-6,
                "{level:?} hd={hd} g={g}: {a} vs {b}"
            );
        }
    }
}

/// A tile of consecutive prompt rows gives every row exactly (bit for bit) what the
/// row gets alone, with and without window and soft-cap, for every tile size.
#[test]
fn a_tile_of_rows_equals_each_row_alone() {
    for (hd, g, first_end, window, softcap) in [
        (64usize, 3usize, 37usize, None, None),
        (64, 3, 5, None, None),
        (32, 1, 100, None, Some(3.0f32)),
        (64, 4, 700, Some(512usize), None),
        (32, 2, 30, Some(7), Some(5.0)),
        (40, 2, 19, None, None),
        (48, 3, 40, None, None),
        // Tiles that reach across a cut between parts (`ATTN_PART`).
        (64, 3, ATTN_PART - 3, None, None),
        (64, 1, 2 * ATTN_PART - 7, Some(ATTN_PART + 100), None),
        (32, 2, ATTN_PART - 2, Some(300), Some(5.0)),
    ] {
        let rows = rows_per_tile(g).max(2);
        let stride = (first_end + rows).next_multiple_of(16) + 16;
        let q = noise(rows * g * hd, 31);
        let keys = halves(noise(hd * stride, 32).iter().map(|x| x * 3.0).collect());
        let values = halves(noise(stride * hd, 33));
        let table = identity(stride);
        let tile: Vec<Attn> = (0..rows)
            .map(|r| {
                let end = first_end + r;
                Attn {
                    q: &q[r * g * hd..(r + 1) * g * hd],
                    hd,
                    keys: &keys,
                    values: &values,
                    table: &table,
                    block_stride: hd * KEY_BLOCK,
                    len: end,
                    scale: 0.125,
                    start: window.map_or(0, |w| end.saturating_sub(w)),
                    softcap,
                }
            })
            .collect();
        for n in 1..=rows {
            let mut got = vec![f32::NAN; n * g * hd];
            attend_rows(&tile[..n], &mut Vec::new(), &mut got);
            // The AVX2 kernel too where the AVX-512 one takes the tiles.
            // (Its kernel alone takes no cut: only tiles inside one part.)
            #[cfg(target_arch = "x86_64")]
            let avx2 = (Simd::current() == Simd::Avx512
                && n * g <= crate::x86::avx2::rows::QUERIES
                && tile[..n].iter().all(|a| a.parts() == tile[0].parts())
                && tile[0].parts().len() == 1)
                .then(|| {
                    let mut got = vec![f32::NAN; n * g * hd];
                    let stats = &mut vec![PartStat::default(); n * g];
                    // SAFETY: the CPU has AVX-512, hence AVX2, FMA and F16C.
                    unsafe {
                        crate::x86::avx2::rows::attend_rows(
                            &tile[..n],
                            &mut Vec::new(),
                            &mut got,
                            stats,
                        )
                    };
                    got
                });
            #[cfg(not(target_arch = "x86_64"))]
            let avx2: Option<Vec<f32>> = None;
            for (r, a) in tile[..n].iter().enumerate() {
                let mut alone = vec![f32::NAN; g * hd];
                attend_group(a, &mut Vec::new(), &mut alone);
                for got in std::iter::once(&got).chain(&avx2) {
                    let part = &got[r * g * hd..(r + 1) * g * hd];
                    assert!(
                        part.iter()
                            .zip(&alone)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "hd={hd} g={g} end={first_end} window={window:?}: row {r} of {n}"
                    );
                }
            }
        }
    }
}

crate::level_tests!(window_and_softcap_match_the_definition);

fn window_and_softcap_match_the_definition(level: Simd) {
    let (hd, g, len, stride) = (32usize, 2usize, 21usize, 32usize);
    let q = noise(g * hd, 21);
    let keys = halves(noise(hd * stride, 22).iter().map(|x| x * 40.0).collect());
    let values = halves(noise(stride * hd, 23));
    let (start, cap) = (9usize, 3.0f32);
    let mut want = vec![0f64; g * hd];
    for h in 0..g {
        let s: Vec<f64> = (start..len)
            .map(|p| {
                let raw: f64 = (0..hd)
                    .map(|d| q[h * hd + d] as f64 * keys[key_index(hd, d, p)].to_f64())
                    .sum();
                cap as f64 * (raw / cap as f64).tanh()
            })
            .collect();
        let max = s.iter().cloned().fold(f64::MIN, f64::max);
        let sum: f64 = s.iter().map(|x| (x - max).exp()).sum();
        for (i, p) in (start..len).enumerate() {
            for d in 0..hd {
                want[h * hd + d] += (s[i] - max).exp() / sum * values[p * hd + d].to_f64();
            }
        }
    }
    let table = identity(stride);
    let a = Attn {
        q: &q,
        hd,
        keys: &keys,
        values: &values,
        table: &table,
        block_stride: hd * KEY_BLOCK,
        len,
        scale: 1.0,
        start,
        softcap: Some(cap),
    };
    let mut out = vec![f32::NAN; g * hd];
    group_at(level, &a, &mut out);
    for (a, b) in out.iter().zip(&want) {
        assert!((*a as f64 - b).abs() < 1e-5, "{level:?}: {a} vs {b}");
    }
}

fn same_bits(x: &[f32], y: &[f32]) -> bool {
    x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits()) && x.len() == y.len()
}

mod paged;
mod parts;
