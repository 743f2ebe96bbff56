//! Attention of one GQA group over a sequence's live positions in the KV cache (f16 keys,
//! transposed, and f16 values, in blocks of 16 positions that a block table finds in a
//! pool): no masks, no gathering, nothing past `len` is used. Options for other
//! architectures: a first position (sliding-window attention) and logit soft-capping; the
//! AVX-512 kernel covers the plain case, the AVX2 kernel every case (head sizes that are
//! multiples of 8), the plain loops the rest. Tests in `attention/tests.rs`.

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
        // the shapes and the block table are checked inside.
        Simd::Avx512 if a.hd.is_multiple_of(16) && a.plain() => unsafe {
            crate::x86::avx512::attend(a, scores, out)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Simd::Avx2 | Simd::Avx512 => unsafe { crate::x86::avx2::attend(a, scores, out) },
        _ => attend_body(a, scores, out, |x, y, acc| x * y + acc),
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
/// soft-cap and differ in queries, `len` and `start`. `out` is `tile.len() x g x hd`. Each row's output is exactly
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
        // the shapes and the block table are checked inside.
        return unsafe { crate::x86::avx512::rows::attend_rows(tile, scores, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if tile.len() > 1
        && matches!(Simd::current(), Simd::Avx2 | Simd::Avx512)
        && tile[0].hd.is_multiple_of(8)
        && tile.len() * (per / tile[0].hd) <= crate::x86::avx2::rows::QUERIES
    {
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports;
        // the shapes and the block table are checked inside.
        return unsafe { crate::x86::avx2::rows::attend_rows(tile, scores, out) };
    }
    for (a, o) in tile.iter().zip(out.chunks_mut(per)) {
        attend_group(a, scores, o);
    }
}

#[cfg(test)]
mod tests;
