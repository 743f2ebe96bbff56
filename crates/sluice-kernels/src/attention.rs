//! Attention of one GQA group over a sequence's live positions in the KV cache (f16 keys,
//! transposed, and f16 values, in blocks of 16 positions that a block table finds in a
//! pool): no masks, no gathering, nothing past `len` is used. Options for other
//! architectures: a first position (sliding-window attention) and logit soft-capping; the
//! AVX-512 kernel covers every case but soft-capping, the AVX2 kernel every case (head
//! sizes that are multiples of 8), the plain loops the rest. A long row is cut into parts
//! of `ATTN_PART` positions, each with its own softmax, merged by their maxima and sums
//! (`merge_parts`); the cuts depend on the row alone. Tests in `attention/tests.rs`.

use crate::layout::{Attn, PartStat};
use crate::plain::{attend_body, exp_fast};
use crate::simd::Simd;

/// Softmax of the scaled scores `q · k` over positions `start..len`, then the weighted sum
/// of the values, into `out` (`g x hd`). `scores` is scratch. A row of more than one part
/// takes each part's softmax and sum in one pass over the row and merges them.
#[inline]
pub fn attend_group(a: &Attn, scores: &mut Vec<f32>, out: &mut [f32]) {
    let parts = a.parts().len();
    let (hd, g) = (a.hd, a.q.len() / a.hd);
    if parts <= 1 {
        // A decode step calls this per (row, KV head) and layer: no allocation for the
        // usual group sizes.
        let mut few = [PartStat::default(); 16];
        let mut many = Vec::new();
        let stats = if g <= few.len() {
            &mut few[..g]
        } else {
            many.resize(g, PartStat::default());
            &mut many[..]
        };
        return kernel_group(a, scores, out, stats);
    }
    let mut stats = vec![PartStat::default(); parts * g];
    let mut outs = vec![0f32; parts * g * hd];
    kernel_group(a, scores, &mut outs, &mut stats);
    merge_parts(parts, &stats, &outs, out);
}

/// Parts `parts` of the row (consecutive, within `Attn::parts`) in one pass: each part's
/// output, normalised by its own sum, into `out` (`parts x g x hd`), and each head's max
/// and sum into `stats` (`parts x g`). `merge_parts` over all of a row's parts gives what
/// `attend_group` gives the row, however they were grouped and whichever threads ran
/// them.
pub fn attend_parts(
    a: &Attn,
    parts: std::ops::Range<usize>,
    scores: &mut Vec<f32>,
    out: &mut [f32],
    stats: &mut [PartStat],
) {
    let run = a.run(parts.clone()).expect("parts of the row");
    assert!(run.parts() == parts, "parts of the row");
    kernel_group(&run, scores, out, stats);
}

/// Merges a row's `parts` parts (`outs`: parts x heads x hd, each normalised by its own
/// sum; `stats`: parts x heads) into `out` (heads x hd): each part is weighted by
/// `exp(max - the row's max) * sum`, over the total of those weights, in part order. One
/// part is copied as it is, so a row of one part has the bits of no cut at all. Plain
/// code, the same on every path.
pub fn merge_parts(parts: usize, stats: &[PartStat], outs: &[f32], out: &mut [f32]) {
    assert!(
        parts > 0
            && stats.len().is_multiple_of(parts)
            && outs.len() == parts * out.len()
            && out.len().is_multiple_of(stats.len() / parts),
        "attention part shapes"
    );
    if parts == 1 {
        out.copy_from_slice(outs);
        return;
    }
    let heads = stats.len() / parts;
    let hd = out.len() / heads;
    let mut weights = vec![0f32; parts];
    for (h, o) in out.chunks_exact_mut(hd).enumerate() {
        let stat = |c: usize| stats[c * heads + h];
        let max = (0..parts).map(|c| stat(c).max).fold(f32::MIN, f32::max);
        for (c, w) in weights.iter_mut().enumerate() {
            *w = exp_fast(stat(c).max - max) * stat(c).sum;
        }
        let inv = 1.0 / weights.iter().sum::<f32>();
        o.fill(0.0);
        for (c, w) in weights.iter().enumerate() {
            let f = w * inv;
            for (o, x) in o.iter_mut().zip(&outs[(c * heads + h) * hd..][..hd]) {
                *o += f * x;
            }
        }
    }
}

/// One kernel call over the row's positions as given, cut into its parts (`out`: parts x
/// g x hd, `stats`: parts x g).
#[inline]
fn kernel_group(a: &Attn, scores: &mut Vec<f32>, out: &mut [f32], stats: &mut [PartStat]) {
    match Simd::current() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports;
        // the shapes and the block table are checked inside.
        Simd::Avx512 if a.hd.is_multiple_of(16) && a.plain() => unsafe {
            crate::x86::avx512::attend(a, scores, out, stats)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 | Simd::Avx512 => unsafe { crate::x86::avx2::attend(a, scores, out, stats) },
        _ => attend_body(a, scores, out, stats, |x, y, acc| x * y + acc),
    }
}

/// Rows of one sequence that `attend_rows` takes in one pass for groups of `g` query heads
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

/// Attention of several rows of one sequence (consecutive prompt positions) against one
/// KV head: the `Attn`s share keys, values, block table and stride, head size, scale and
/// soft-cap and differ in queries, `len` and `start`. `out` is `tile.len() x g x hd`. Each
/// row's output is exactly what `attend_group` gives it alone (the AVX2 and AVX-512 passes
/// widen each key and value once for the whole tile; a tile that reaches into several
/// parts takes them one at a time, each with the rows that have positions there).
pub fn attend_rows(tile: &[Attn], scores: &mut Vec<f32>, out: &mut [f32]) {
    assert!(
        !tile.is_empty() && out.len().is_multiple_of(tile.len()),
        "attention tile shapes"
    );
    if tile.len() == 1 {
        return attend_group(&tile[0], scores, out);
    }
    let per = out.len() / tile.len();
    let g = per / tile[0].hd;
    let first = tile.iter().map(|a| a.parts().start).min().unwrap_or(0);
    let end = tile.iter().map(|a| a.parts().end).max().unwrap_or(0);
    if end <= first + 1 {
        let mut stats = vec![PartStat::default(); tile.len() * g];
        return kernel_rows(tile, scores, out, &mut stats);
    }
    // Row r's parts go to its own run of `outs` and `stats`, from part `at[r]`.
    let mut at = Vec::with_capacity(tile.len() + 1);
    at.push(0);
    for a in tile {
        at.push(at.last().copied().unwrap_or(0) + a.parts().len());
    }
    let total = at[tile.len()];
    let mut outs = vec![0f32; total * per];
    let mut stats = vec![PartStat::default(); total * g];
    let (mut sub_out, mut sub_stats) = (Vec::new(), Vec::new());
    for c in first..end {
        let (rows, sub): (Vec<usize>, Vec<Attn>) = tile
            .iter()
            .enumerate()
            .filter_map(|(r, a)| a.part(c).map(|p| (r, p)))
            .unzip();
        if rows.is_empty() {
            continue;
        }
        sub_out.resize(sub.len() * per, 0.0);
        sub_stats.resize(sub.len() * g, PartStat::default());
        kernel_rows(&sub, scores, &mut sub_out, &mut sub_stats);
        for (k, &r) in rows.iter().enumerate() {
            let i = at[r] + c - tile[r].parts().start;
            outs[i * per..][..per].copy_from_slice(&sub_out[k * per..][..per]);
            stats[i * g..][..g].copy_from_slice(&sub_stats[k * g..][..g]);
        }
    }
    for (r, o) in out.chunks_exact_mut(per).enumerate() {
        let (i, n) = (at[r], at[r + 1] - at[r]);
        merge_parts(n, &stats[i * g..][..n * g], &outs[i * per..][..n * per], o);
    }
}

/// The tile kernel of the level where it takes the tile, else each row alone (no cut).
fn kernel_rows(tile: &[Attn], scores: &mut Vec<f32>, out: &mut [f32], stats: &mut [PartStat]) {
    let per = out.len() / tile.len();
    #[cfg(target_arch = "x86_64")]
    if tile.len() > 1
        && Simd::current() == Simd::Avx512
        && tile[0].hd.is_multiple_of(16)
        && tile.len() * (per / tile[0].hd) <= crate::x86::avx512::rows::QUERIES
    {
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports;
        // the shapes and the block table are checked inside.
        return unsafe { crate::x86::avx512::rows::attend_rows(tile, scores, out, stats) };
    }
    #[cfg(target_arch = "x86_64")]
    if tile.len() > 1
        && matches!(Simd::current(), Simd::Avx2 | Simd::Avx512)
        && tile[0].hd.is_multiple_of(8)
        && tile.len() * (per / tile[0].hd) <= crate::x86::avx2::rows::QUERIES
    {
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports;
        // the shapes and the block table are checked inside.
        return unsafe { crate::x86::avx2::rows::attend_rows(tile, scores, out, stats) };
    }
    let g = per / tile[0].hd;
    for ((a, o), s) in tile
        .iter()
        .zip(out.chunks_mut(per))
        .zip(stats.chunks_mut(g))
    {
        kernel_group(a, scores, o, s);
    }
}

#[cfg(test)]
mod tests;
