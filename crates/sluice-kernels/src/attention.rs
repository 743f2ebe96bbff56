//! Attention of one GQA group over a slot's live positions in the KV slab (f16 keys,
//! transposed, and f16 values): no masks, no concatenation, nothing past `len` is used.
//! Options for other architectures: a first position (sliding-window attention) and
//! logit soft-capping; the AVX-512 kernel covers the plain case, the AVX2 kernel every
//! case (head sizes that are multiples of 8), the plain loops the rest.

use crate::layout::Attn;
use crate::plain::attend_body;
use crate::simd::Simd;

/// Softmax of the scaled scores `q · k` over positions `0..len`, then the weighted sum of
/// the values, into `out` (`g x hd`). `scores` is scratch.
#[inline]
pub fn attend_group(a: &Attn, scores: &mut Vec<f32>, out: &mut [f32]) {
    match Simd::current() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports;
        // the shapes are checked inside.
        Simd::Avx512 if a.hd.is_multiple_of(16) && a.plain() => unsafe {
            crate::x86::avx512::attend(a, scores, out)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 | Simd::Avx512 => unsafe { crate::x86::avx2::attend(a, scores, out) },
        _ => attend_body(a, scores, out, |x, y, acc| x * y + acc),
    }
}

/// Rows of one slot that `attend_rows` takes in one pass for groups of `g` query heads
/// (1 when tiling would not pay).
pub fn rows_per_tile(g: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    if Simd::current() == Simd::Avx512 && g > 0 {
        return (crate::x86::avx512::rows::QUERIES / g).max(1);
    }
    #[cfg(target_arch = "x86_64")]
    if Simd::current() == Simd::Avx2 && g > 0 {
        return (crate::x86::avx2::rows::QUERIES / g).max(1);
    }
    let _ = g;
    1
}

/// Attention of several rows of one slot (consecutive prompt positions) against one KV
/// head: the `Attn`s share keys, values, head size, scale and soft-cap and differ in
/// queries and positions. `out` is `tile.len() x g x hd`. Each row's output is exactly
/// what `attend_group` gives it alone (the AVX2 and AVX-512 passes widen each key and
/// value once for the whole tile).
pub fn attend_rows(tile: &[Attn], scores: &mut Vec<f32>, out: &mut [f32]) {
    assert!(
        !tile.is_empty() && out.len().is_multiple_of(tile.len()),
        "attention tile shapes"
    );
    let per = out.len() / tile.len();
    #[cfg(target_arch = "x86_64")]
    if tile.len() > 1
        && Simd::current() == Simd::Avx512
        && tile[0].hd.is_multiple_of(16)
        && tile.len() * (per / tile[0].hd) <= crate::x86::avx512::rows::QUERIES
    {
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports;
        // the shapes are checked inside.
        return unsafe { crate::x86::avx512::rows::attend_rows(tile, scores, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if tile.len() > 1
        && matches!(Simd::current(), Simd::Avx2 | Simd::Avx512)
        && tile[0].hd.is_multiple_of(8)
        && tile.len() * (per / tile[0].hd) <= crate::x86::avx2::rows::QUERIES
    {
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports;
        // the shapes are checked inside.
        return unsafe { crate::x86::avx2::rows::attend_rows(tile, scores, out) };
    }
    for (a, o) in tile.iter().zip(out.chunks_mut(per)) {
        attend_group(a, scores, o);
    }
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::*;
    use crate::layout::key_index;
    use crate::simd::noise;

    crate::level_tests!(attention_matches_f64_softmax_on_every_level);

    fn attention_matches_f64_softmax_on_every_level(level: Simd) {
        let halves = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
        for (hd, g, len) in [
            (64usize, 3usize, 37usize),
            (64, 5, 16),
            (128, 1, 3),
            (48, 2, 20),
        ] {
            let stride = len.next_multiple_of(16) + 16;
            let q = noise(g * hd, 11);
            let keys_t = halves(noise(hd * stride, 12));
            let values = halves(noise(len * hd, 13));
            let scale = 0.125;
            let mut want = vec![0f64; g * hd];
            for h in 0..g {
                let s: Vec<f64> = (0..len)
                    .map(|p| {
                        (0..hd)
                            .map(|d| q[h * hd + d] as f64 * keys_t[key_index(hd, d, p)].to_f64())
                            .sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let max = s.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for p in 0..len {
                    for d in 0..hd {
                        want[h * hd + d] += e[p] / sum * values[p * hd + d].to_f64();
                    }
                }
            }
            let a = Attn {
                q: &q,
                hd,
                keys_t: &keys_t,
                stride,
                values: &values,
                scale,
                start: 0,
                softcap: None,
            };
            let mut scratch = Vec::new();
            {
                let mut out = vec![f32::NAN; g * hd];
                match level {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the level is available (checked above).
                    Simd::Avx512 if hd % 16 == 0 => unsafe {
                        crate::x86::avx512::attend(&a, &mut scratch, &mut out)
                    },
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above.
                    Simd::Avx2 | Simd::Avx512 => unsafe {
                        crate::x86::avx2::attend(&a, &mut scratch, &mut out)
                    },
                    _ => attend_body(&a, &mut scratch, &mut out, |x, y, acc| x * y + acc),
                }
                for (a, b) in out.iter().zip(&want) {
                    assert!(
                        (*a as f64 - b).abs() < 1e-6,
                        "{level:?} hd={hd} g={g}: {a} vs {b}"
                    );
                }
            }
        }
    }

    /// A tile of consecutive prompt rows gives every row exactly (bit for bit) what the
    /// row gets alone, with and without window and soft-cap, for every tile size.
    #[test]
    fn a_tile_of_rows_equals_each_row_alone() {
        let halves = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
        for (hd, g, first_end, window, softcap) in [
            (64usize, 3usize, 37usize, None, None),
            (64, 3, 5, None, None),
            (32, 1, 100, None, Some(3.0f32)),
            (64, 4, 700, Some(512usize), None),
            (32, 2, 30, Some(7), Some(5.0)),
            (40, 2, 19, None, None),
            (48, 3, 40, None, None),
        ] {
            let rows = rows_per_tile(g).max(2);
            let stride = (first_end + rows).next_multiple_of(16) + 16;
            let q = noise(rows * g * hd, 31);
            let keys_t = halves(noise(hd * stride, 32).iter().map(|x| x * 3.0).collect());
            let values = halves(noise(stride * hd, 33));
            let tile: Vec<Attn> = (0..rows)
                .map(|r| {
                    let end = first_end + r;
                    Attn {
                        q: &q[r * g * hd..(r + 1) * g * hd],
                        hd,
                        keys_t: &keys_t,
                        stride,
                        values: &values[..end * hd],
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
                #[cfg(target_arch = "x86_64")]
                let avx2 = (Simd::current() == Simd::Avx512
                    && n * g <= crate::x86::avx2::rows::QUERIES)
                    .then(|| {
                        let mut got = vec![f32::NAN; n * g * hd];
                        // SAFETY: the CPU has AVX-512, hence AVX2, FMA and F16C.
                        unsafe {
                            crate::x86::avx2::rows::attend_rows(
                                &tile[..n],
                                &mut Vec::new(),
                                &mut got,
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
        let halves = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
        let (hd, g, len, stride) = (32usize, 2usize, 21usize, 32usize);
        let q = noise(g * hd, 21);
        let keys_t = halves(noise(hd * stride, 22).iter().map(|x| x * 40.0).collect());
        let values = halves(noise(len * hd, 23));
        let (start, cap) = (9usize, 3.0f32);
        let mut want = vec![0f64; g * hd];
        for h in 0..g {
            let s: Vec<f64> = (start..len)
                .map(|p| {
                    let raw: f64 = (0..hd)
                        .map(|d| q[h * hd + d] as f64 * keys_t[key_index(hd, d, p)].to_f64())
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
        let a = Attn {
            q: &q,
            hd,
            keys_t: &keys_t,
            stride,
            values: &values,
            scale: 1.0,
            start,
            softcap: Some(cap),
        };
        {
            let mut out = vec![f32::NAN; g * hd];
            match level {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the level is available (checked above).
                Simd::Avx2 => unsafe { crate::x86::avx2::attend(&a, &mut Vec::new(), &mut out) },
                Simd::Avx512 => attend_group(&a, &mut Vec::new(), &mut out),
                _ => attend_body(&a, &mut Vec::new(), &mut out, |x, y, acc| x * y + acc),
            }
            for (a, b) in out.iter().zip(&want) {
                assert!((*a as f64 - b).abs() < 1e-5, "{level:?}: {a} vs {b}");
            }
        }
    }
}
