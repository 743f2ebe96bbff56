//! The AVX2 integer matmul of `PackedMatrix` (AVX2 with FMA and F16C): int8 activations
//! (`acts.rs`) against the grouped weights (`packed.rs`), `vpmaddubsw` for the products.
//! `unsafe` only because of the CPU features, which `Simd::current` checks once.
//!
//! A tile is `R` activation rows against the 16 rows of one weight group, both 8-row
//! halves at once (`H` = 2): each activation broadcast feeds a chunk of each half, so a
//! chunk of 32 products costs a `vpmaddubsw`, a 16-bit add and half a broadcast. Taking
//! both halves with 3 rows was 1.2-1.3x faster than one half with 6 rows (5- and 6-bit
//! quants at 32 and 64 rows, `benches/kernels`); compact 5- and 6-bit quants, which need
//! more registers to unpack, take one half at a time with 4 rows.

use std::arch::x86_64::*;

use super::prefetch_ahead;
pub(crate) use super::scales::Expanded;
use super::scales::{factored256, lanes256};
use super::vnni::dpbusd;
use crate::layout::{
    GROUP, PF_ANY, PF_L2, PF_OFF, PREFETCH_ROWS, PackedMatrix, Part, QuantActs, SC_ANY,
    SC_FACTORED, SC_HALF, VNNI_NONE, neg_sum, prefetch, prefetch_case, scale_case, specialised,
};

/// Chunks whose `vpmaddubsw` pair sums can be added in 16 bits before widening: a pair
/// is at most `2 · max_u · 128`, so 8 chunks of 4-bit quants (and of each 4-bit half of
/// WIDE quants), 4 of 5-bit and 2 of 6-bit stay below 32,768. Signed Q8_0 (|w| up to 128)
/// widens every chunk. A derived offset taken into the sum (`FOLD`) makes it a whole block.
const fn run16(bits: u32, signed: bool) -> usize {
    match (signed, bits) {
        (true, _) => 1,
        (false, 4) => 8,
        (false, 5) => 4,
        _ => 2,
    }
}

/// Halves `h0..h0 + H` (8 rows each) of group `g` against activation rows `i0..i0 + R`,
/// one 8-lane accumulator per (row, half). Each chunk of a block's quants is unpacked once
/// (nibbles split, high-plane bits merged, quants above 63 split into 4-bit halves for
/// `vpmaddubsw`) and multiplied against all `R` rows, whose 16-bit partial sums stay in
/// registers (chunk-outer). Every row's sums are taken in the same order whatever `R` and
/// `H` are, and integer sums are exact, so the 16-bit runs change no result.
///
/// With `FOLD` > 0 the offset is `-2^FOLD·d` (Q4_0, Q5_0, Q6_K: `layout::folded_shift`)
/// and goes into the integer sum: each row's 16-bit sums start at its lane sums shifted
/// left by `FOLD` (`acts::lane_sums`), so they end at `Σ (u - 2^FOLD)·q`, which
/// `folded_shift` keeps below 2^15 in magnitude and so is exact in 16 bits whatever the
/// order of the wrapping adds. The whole block is summed in 16 bits, and the float
/// epilogue is one multiply-add instead of two.
#[inline(always)]
unsafe fn tile<
    const NIB: bool,
    const BK: usize,
    const WIDE: bool,
    const SIGNED: bool,
    const BITS: u32,
    const FOLD: i32,
    const H: usize,
    const R: usize,
    const PF: u8,
    const SC: u8,
    const V: u8,
>(
    p: &PackedMatrix,
    a: &QuantActs,
    g: usize,
    h0: usize,
    i0: usize,
    expanded: Option<&Expanded>,
) -> [[__m256; H]; R] {
    let chunks = BK / 4;
    let run = if FOLD > 0 {
        chunks
    } else {
        run16(BITS, SIGNED)
    };
    // Bits above the nibble in the high plane (compact 5- and 6-bit quants).
    let high_bits = crate::layout::high_bits(NIB, BITS);
    let nb = p.blocks();
    let cols = a.cols;
    let sums = a.sums(BK);
    let lane_sums = if BK == 16 { &a.l16 } else { &a.l32 };
    let plane_at = p.high_plane();
    // SAFETY (whole body): the caller passes a group, halves and activation rows inside
    // the matrix and the activations; every block's quants, high plane (64 bytes inside
    // the block) and 16 scales are inside the packing; activation row `i0 + k` has `cols`
    // quants, `cols / 32` scales and `nb` sums; avx2, fma and f16c enabled by the caller.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); H]; R];
        // Pointers of block 0, stepped by the block sizes: nothing per block but adds.
        let q0 = p.quants(g, 0);
        let qb = if SC == SC_ANY {
            p.block_quant_bytes()
        } else {
            const { PackedMatrix::quant_bytes(BK, NIB, crate::layout::high_bits(NIB, BITS)) }
        };
        debug_assert_eq!(qb, p.block_quant_bytes());
        // Factored scales come either inline (few rows) or expanded for this group
        // (`Expanded`), read then as f32 lanes.
        let (d0, m0, sb, half, factored) = match expanded {
            Some(e) => {
                let (d0, m0) = e.lanes();
                (d0, m0, GROUP * 4, false, 0)
            }
            None => {
                let (d0, m0) = p.scales(g, 0);
                (d0, m0, p.lane_bytes(), p.half, p.factored)
            }
        };
        debug_assert!(SC == SC_ANY || (expanded.is_none() && SC == scale_case(p)));
        let sb = match SC {
            SC_HALF => GROUP * 2,
            SC_FACTORED => GROUP,
            _ => sb,
        };
        // Offsets stored beside the scales (not derived from them, not folded).
        let stored_m = p.m_of_d.is_none() && FOLD == 0 && !SIGNED;
        let (ds0, ms0) = p.supers(g, 0);
        let x0: [*const i8; R] = std::array::from_fn(|k| a.q.as_ptr().add((i0 + k) * cols));
        let da0: [*const f32; R] = std::array::from_fn(|k| a.d.as_ptr().add((i0 + k) * cols / 32));
        let low = _mm256_set1_epi8(0x0F);
        let hmask = _mm256_set1_epi8(if high_bits == 1 { 0x10 } else { 0x30 });
        let sixteen = _mm256_set1_epi16(16);
        let ones = _mm256_set1_epi16(1);
        let (ahead, hint) = prefetch();
        // Blocks per super-block: factored scales' f16 factors are converted once for each.
        let per = if SC == SC_FACTORED { factored } else { 1 };
        let mut b0 = 0;
        let mut sup = 0;
        while b0 < nb {
            let (dsup, msup): ([__m256; H], [__m256; H]) = if SC == SC_FACTORED {
                let at = sup * GROUP * 2;
                let lanes = |s0: *const u8, j: usize| {
                    _mm256_cvtph_ps(_mm_loadu_si128(s0.add(at + 16 * (h0 + j)) as *const __m128i))
                };
                (
                    std::array::from_fn(|j| lanes(ds0, j)),
                    std::array::from_fn(|j| {
                        if stored_m {
                            lanes(ms0, j)
                        } else {
                            _mm256_setzero_ps()
                        }
                    }),
                )
            } else {
                ([_mm256_setzero_ps(); H], [_mm256_setzero_ps(); H])
            };
            let end = (b0 + per).min(nb);
            for b in b0..end {
                let q = q0.add(b * qb);
                match PF {
                    PF_L2 => {
                        if h0 == 0 {
                            for l in (0..qb).step_by(64) {
                                _mm_prefetch::<_MM_HINT_T1>(q.wrapping_add(ahead + l) as *const i8);
                            }
                        }
                    }
                    PF_OFF => {}
                    _ => {
                        if a.n <= PREFETCH_ROWS && h0 == 0 {
                            prefetch_ahead(q, qb, ahead, hint);
                        }
                    }
                }
                let mut isum = [[_mm256_setzero_si256(); H]; R];
                let mut part = [[_mm256_setzero_si256(); H]; R];
                if FOLD > 0 && V != VNNI_NONE {
                    // `vpdpbusd` sums in 32 bits: start at the exact `-2^FOLD·Σq`.
                    for (k, isum) in isum.iter_mut().enumerate() {
                        let l = *lane_sums.get_unchecked((i0 + k) * nb + b);
                        *isum = [_mm256_set1_epi32(neg_sum(l) << FOLD); H];
                    }
                } else if FOLD > 0 {
                    for (k, part) in part.iter_mut().enumerate() {
                        let l = *lane_sums.get_unchecked((i0 + k) * nb + b);
                        *part =
                            [_mm256_sll_epi16(_mm256_set1_epi32(l), _mm_cvtsi32_si128(FOLD)); H];
                    }
                }
                let mut parth = [[_mm256_setzero_si256(); H]; R];
                let plane: [__m256i; H] = std::array::from_fn(|j| {
                    if high_bits > 0 {
                        _mm256_loadu_si256(q.add(plane_at + 32 * (h0 + j)) as *const __m256i)
                    } else {
                        _mm256_setzero_si256()
                    }
                });
                for c in 0..chunks {
                    // `w`: unsigned quants (|w| for SIGNED, whose signs stay in `wh` for
                    // vpsignb; the low nibbles for WIDE, whose high ones are `wh`).
                    let mut w = [_mm256_setzero_si256(); H];
                    let mut wh = [_mm256_setzero_si256(); H];
                    for j in 0..H {
                        let h = h0 + j;
                        let raw = if NIB {
                            let v = c % (chunks / 2);
                            let raw = _mm256_loadu_si256(q.add(64 * v + 32 * h) as *const __m256i);
                            let nib = if c < chunks / 2 {
                                _mm256_and_si256(raw, low)
                            } else {
                                _mm256_and_si256(_mm256_srli_epi16(raw, 4), low)
                            };
                            if high_bits > 0 {
                                // This chunk's plane bits moved to bits 4.. of each byte (16-bit
                                // shifts by at most 4 bring no bit of the other byte there).
                                let s = 4 - (high_bits * c) as i32;
                                let moved = if s >= 0 {
                                    _mm256_sll_epi16(plane[j], _mm_cvtsi32_si128(s))
                                } else {
                                    _mm256_srl_epi16(plane[j], _mm_cvtsi32_si128(-s))
                                };
                                _mm256_or_si256(nib, _mm256_and_si256(moved, hmask))
                            } else {
                                nib
                            }
                        } else {
                            _mm256_loadu_si256(q.add(64 * c + 32 * h) as *const __m256i)
                        };
                        (w[j], wh[j]) = if WIDE && V != VNNI_NONE {
                            // Whole bytes: `vpdpbusd` cannot saturate.
                            (raw, raw)
                        } else if WIDE {
                            (
                                _mm256_and_si256(raw, low),
                                _mm256_and_si256(_mm256_srli_epi16(raw, 4), low),
                            )
                        } else if SIGNED {
                            (_mm256_abs_epi8(raw), raw)
                        } else {
                            (raw, raw)
                        };
                    }
                    for k in 0..R {
                        let xc = _mm256_set1_epi32(
                            (x0[k].add(b * BK + 4 * c) as *const i32).read_unaligned(),
                        );
                        for j in 0..H {
                            let (part, parth, isum) =
                                (&mut part[k][j], &mut parth[k][j], &mut isum[k][j]);
                            if V != VNNI_NONE {
                                let x = if SIGNED {
                                    _mm256_sign_epi8(xc, wh[j])
                                } else {
                                    xc
                                };
                                // One or two chains (a decode row): split in two by
                                // chunk, which halves the chain of `vpdpbusd` latencies
                                // (`part`, unused here, holds the odd chunks).
                                if R * H <= 2 && c % 2 == 1 {
                                    *part = dpbusd::<V>(*part, w[j], x);
                                } else {
                                    *isum = dpbusd::<V>(*isum, w[j], x);
                                }
                                if R * H <= 2 && c + 1 == chunks {
                                    *isum = _mm256_add_epi32(*isum, *part);
                                }
                                continue;
                            }
                            if WIDE {
                                // Two 4-bit planes, each summed in 16 bits for the whole block.
                                *part = _mm256_add_epi16(*part, _mm256_maddubs_epi16(w[j], xc));
                                *parth = _mm256_add_epi16(*parth, _mm256_maddubs_epi16(wh[j], xc));
                                if c + 1 == chunks {
                                    *isum = _mm256_add_epi32(
                                        _mm256_madd_epi16(*part, ones),
                                        _mm256_madd_epi16(*parth, sixteen),
                                    );
                                }
                                continue;
                            }
                            let pairs = if SIGNED {
                                _mm256_maddubs_epi16(w[j], _mm256_sign_epi8(xc, wh[j]))
                            } else {
                                _mm256_maddubs_epi16(w[j], xc)
                            };
                            if run == 1 {
                                *isum = _mm256_add_epi32(*isum, _mm256_madd_epi16(pairs, ones));
                                continue;
                            }
                            *part = _mm256_add_epi16(*part, pairs);
                            if (c + 1) % run == 0 || c + 1 == chunks {
                                *isum = _mm256_add_epi32(*isum, _mm256_madd_epi16(*part, ones));
                                *part = _mm256_setzero_si256();
                            }
                        }
                    }
                }
                let (dp, mp) = (d0.add(b * sb), m0.wrapping_add(b * sb));
                let mut dw = [_mm256_setzero_ps(); H];
                let mut mw = [_mm256_setzero_ps(); H];
                for j in 0..H {
                    let h = h0 + j;
                    if SC == SC_FACTORED {
                        // As `factored256`: the i8 integers times the super-block's lanes.
                        let ints = |sub: *const u8| {
                            let v = _mm_loadl_epi64(sub.add(8 * h) as *const __m128i);
                            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
                        };
                        dw[j] = _mm256_mul_ps(ints(dp), dsup[j]);
                        if stored_m {
                            mw[j] = _mm256_mul_ps(ints(mp), msup[j]);
                        }
                    } else if SC == SC_HALF {
                        dw[j] = lanes256(dp, true, h);
                        if stored_m {
                            mw[j] = lanes256(mp, true, h);
                        }
                    } else if let Some(s) = b.checked_div(factored) {
                        let at = s * GROUP * 2;
                        dw[j] = factored256(dp, ds0.add(at), h);
                        if stored_m {
                            mw[j] = factored256(mp, ms0.add(at), h);
                        }
                    } else {
                        dw[j] = lanes256(dp, half, h);
                        if stored_m {
                            mw[j] = lanes256(mp, half, h);
                        }
                    }
                    if let Some(k) = p.m_of_d
                        && FOLD == 0
                        && !SIGNED
                    {
                        mw[j] = _mm256_mul_ps(dw[j], _mm256_set1_ps(k));
                    }
                }
                for (k, acc) in acc.iter_mut().enumerate() {
                    let da = _mm256_set1_ps(*da0[k].add(b * BK / 32));
                    let s = if !SIGNED && FOLD == 0 {
                        _mm256_set1_ps(*sums.get_unchecked((i0 + k) * nb + b))
                    } else {
                        _mm256_setzero_ps()
                    };
                    for j in 0..H {
                        let scale = _mm256_mul_ps(dw[j], da);
                        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[k][j]), scale, acc[j]);
                        if !SIGNED && FOLD == 0 {
                            acc[j] = _mm256_fmadd_ps(mw[j], s, acc[j]);
                        }
                    }
                }
            }
            b0 = end;
            sup += 1;
        }
        acc
    }
}

/// One part of a matmul in tiles (`tile`): per group, 3 rows against both halves (4
/// against one half at a time for compact 5- and 6-bit quants), the rest in
/// one narrower tile, and 4 rows (a few streams' decode) in one tile so that compact
/// weights are unpacked once.
#[inline(always)]
pub(super) unsafe fn run256<
    const NIB: bool,
    const BK: usize,
    const WIDE: bool,
    const SIGNED: bool,
    const BITS: u32,
    const FOLD: i32,
    const V: u8,
>(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY (whole body): the caller's part is inside the matrix and the activations, and
    // `y` is valid for its outputs (`matmul_groups`).
    unsafe {
        let mut lanes = [0f32; GROUP];
        // Groups before `full` have all 16 rows: their lanes go straight to `y`.
        let full = p.rows() / GROUP;
        let mut put = |g: usize, i: usize, lo: __m256, hi: __m256| {
            if g < full {
                let o = y.add(i * stride + g * GROUP);
                _mm256_storeu_ps(o, lo);
                _mm256_storeu_ps(o.add(8), hi);
                return;
            }
            _mm256_storeu_ps(lanes.as_mut_ptr(), lo);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), hi);
            p.store(g, i, &lanes, y, stride);
        };
        // Many rows against factored scales: each group's scales expanded once, not once
        // per tile (10-20% of a K-quant matmul at 64 rows otherwise).
        let mut expanded = Expanded::for_rows(p, part.rows.len());
        // One row (decode, or the last of a batch) runs `tile` compiled for its prefetch
        // and scale case (`specialised`), as the AVX-512 kernel's `lone` does.
        let fixed = specialised();
        let pf = prefetch_case(a.n, prefetch().1);
        let sc = if expanded.is_some() {
            SC_ANY
        } else {
            scale_case(p)
        };
        macro_rules! at {
            ($h:literal, $r:literal, $pf:ident, $sc:ident, $h0:expr, $g:expr, $i:expr) => {
                tile::<NIB, BK, WIDE, SIGNED, BITS, FOLD, $h, $r, $pf, $sc, V>(
                    p,
                    a,
                    $g,
                    $h0,
                    $i,
                    expanded.as_ref(),
                )
            };
        }
        macro_rules! lone {
            ($h:literal, $h0:expr, $g:expr, $i:expr) => {
                match (fixed, pf, sc) {
                    (true, PF_L2, SC_HALF) => at!($h, 1, PF_L2, SC_HALF, $h0, $g, $i),
                    (true, PF_L2, SC_FACTORED) => at!($h, 1, PF_L2, SC_FACTORED, $h0, $g, $i),
                    (true, PF_OFF, SC_HALF) => at!($h, 1, PF_OFF, SC_HALF, $h0, $g, $i),
                    (true, PF_OFF, SC_FACTORED) => at!($h, 1, PF_OFF, SC_FACTORED, $h0, $g, $i),
                    _ => at!($h, 1, PF_ANY, SC_ANY, $h0, $g, $i),
                }
            };
        }
        macro_rules! tile {
            (both, lone, $g:expr, $i:expr) => {{
                let t = lone!(2, 0, $g, $i);
                put($g, $i, t[0][0], t[0][1]);
            }};
            (one, lone, $g:expr, $i:expr) => {{
                let lo = lone!(1, 0, $g, $i);
                let hi = lone!(1, 1, $g, $i);
                put($g, $i, lo[0][0], hi[0][0]);
            }};
            (both, $r:literal, $g:expr, $i:expr) => {{
                let t = at!(2, $r, PF_ANY, SC_ANY, 0, $g, $i);
                for (k, t) in t.iter().enumerate() {
                    put($g, $i + k, t[0], t[1]);
                }
            }};
            (one, $r:literal, $g:expr, $i:expr) => {{
                let lo = at!(1, $r, PF_ANY, SC_ANY, 0, $g, $i);
                let hi = at!(1, $r, PF_ANY, SC_ANY, 1, $g, $i);
                for k in 0..$r {
                    put($g, $i + k, lo[k][0], hi[k][0]);
                }
            }};
        }
        // Full tiles, then the rest in one narrower tile (each row's sums are the same in
        // any tile); 4 rows left make one tile of 4.
        macro_rules! tiles {
            ($kind:ident, $full:literal, $g:expr) => {{
                let (g, end) = ($g, part.rows.end);
                let mut i = part.rows.start;
                while i + $full <= end && end - i != 4 {
                    tile!($kind, $full, g, i);
                    i += $full;
                }
                match end - i {
                    0 => {}
                    1 => tile!($kind, lone, g, i),
                    2 => tile!($kind, 2, g, i),
                    3 => tile!($kind, 3, g, i),
                    _ => tile!($kind, 4, g, i),
                }
            }};
        }
        let compact = crate::layout::high_bits(NIB, BITS) > 0;
        for g in part.groups.clone() {
            if let Some(e) = expanded.as_mut() {
                e.fill(p, g);
            }
            if compact {
                tiles!(one, 4, g);
            } else {
                tiles!(both, 3, g);
            }
        }
    }
}
