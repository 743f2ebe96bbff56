//! The AVX-512 VNNI matmul of `PackedMatrix` (layout in `packed.rs`).
//!
//! A group's 16 weight rows meet the activation rows 8 at a time (`tile`), reading them
//! from the tiled copy `acts_tiles` lays out; the rows past the last whole tile, and every
//! row of a decode step, go one at a time (`lone`), reading the row-major quants. Both
//! compute the same numbers for a row: the same exact integer sum of each block (the
//! offset `-2^s·d`, where the format has one, started inside it from `-2^s·Σq`), then the
//! same float steps in the same order. So a row's output does not depend on how many rows
//! it came with.

use std::arch::x86_64::*;

use crate::x86::avx2::matmul::Expanded;

use crate::layout::{FOLDS, GROUP, PackedMatrix, Part, QuantActs, TILE};

/// Loads 16 scale lanes (f16 or f32).
#[inline(always)]
unsafe fn lanes512(p: *const u8, half: bool) -> __m512 {
    // SAFETY: `p` holds 16 scales of the stored width; avx512f enabled by the caller.
    unsafe {
        if half {
            _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
        } else {
            _mm512_loadu_ps(p as *const f32)
        }
    }
}

/// 16 lanes of factored scales (`PackedMatrix::factored`): i8 integers at `sub` times the
/// f16 super-block scales at `sup`, exactly the values the unfactored form stores.
#[inline(always)]
unsafe fn factored512(sub: *const u8, sup: *const u8) -> __m512 {
    // SAFETY: `sub` holds 16 bytes and `sup` 16 f16; features enabled by the caller.
    unsafe {
        let ints = _mm512_cvtepi8_epi32(_mm_loadu_si128(sub as *const __m128i));
        let s = _mm512_cvtph_ps(_mm256_loadu_si256(sup as *const __m256i));
        _mm512_mul_ps(_mm512_cvtepi32_ps(ints), s)
    }
}

/// One weight group's blocks: where each block's quants and scale lanes are.
struct Group {
    q0: *const u8,
    qb: usize,
    d0: *const u8,
    m0: *const u8,
    lane_bytes: usize,
    half: bool,
    /// Blocks per super-block of factored scales (0: not factored), and the group's
    /// super-block scales and offsets.
    factored: usize,
    ds0: *const u8,
    ms0: *const u8,
}

impl Group {
    /// Group `g`, its scales read from `ex` (this group's, expanded) when given.
    #[inline(always)]
    fn with(p: &PackedMatrix, g: usize, ex: Option<&Expanded>) -> Self {
        let Some(ex) = ex else {
            return Self::new(p, g);
        };
        let (d0, m0) = ex.lanes();
        Self {
            q0: p.quants(g, 0),
            qb: p.block_quant_bytes(),
            d0,
            m0,
            lane_bytes: GROUP * 4,
            half: false,
            factored: 0,
            ds0: std::ptr::null(),
            ms0: std::ptr::null(),
        }
    }

    #[inline(always)]
    fn new(p: &PackedMatrix, g: usize) -> Self {
        let (d0, m0) = p.scales(g, 0);
        let (ds0, ms0) = p.supers(g, 0);
        Self {
            q0: p.quants(g, 0),
            qb: p.block_quant_bytes(),
            d0,
            m0,
            lane_bytes: p.lane_bytes(),
            half: p.half,
            factored: p.factored,
            ds0,
            ms0,
        }
    }

    /// Block `b`'s quant bytes.
    #[inline(always)]
    unsafe fn quants(&self, b: usize) -> *const u8 {
        // SAFETY: `b` is a block of the group (the caller's contract).
        unsafe { self.q0.add(b * self.qb) }
    }

    /// Block `b`'s scales and, without `FOLD`, offsets (with it, the scales stand in).
    #[inline(always)]
    unsafe fn scales<const FOLD: bool>(&self, b: usize) -> (__m512, __m512) {
        // SAFETY: `b` is a block of the group, whose offsets are stored unless `FOLD`
        // (and whose super-block lanes are stored when factored); features enabled by
        // the caller.
        unsafe {
            let dw = self.lanes(self.d0, self.ds0, b);
            let mw = if FOLD {
                dw
            } else {
                self.lanes(self.m0, self.ms0, b)
            };
            (dw, mw)
        }
    }

    /// Block `b`'s 16 lanes of the scales (or offsets) stored from `base`, with their
    /// super-block lanes from `sup` when factored.
    #[inline(always)]
    unsafe fn lanes(&self, base: *const u8, sup: *const u8, b: usize) -> __m512 {
        // SAFETY: as in `scales`.
        unsafe {
            if let Some(s) = b.checked_div(self.factored) {
                factored512(base.add(b * self.lane_bytes), sup.add(s * GROUP * 2))
            } else {
                lanes512(base.add(b * self.lane_bytes), self.half)
            }
        }
    }
}

/// The GF(2) bit matrix of `vgf2p8affineqb` that moves bits 4-7 of every byte to bits 0-3
/// and clears bits 4-7: row `i` of the matrix (byte `7 - i`) picks input bit `i + 4` for
/// output bit `i` (i < 4), and the rows of bits 4-7 are zero.
const HIGH_NIBBLE: i64 = 0x1020_4080_0000_0000;

/// One block's quants (`q`) as `BK / 4` chunk registers of 16 lanes x 4 bytes. With
/// `HIGH` (1 or 2: compact 5- and 6-bit quants), the bits above each nibble come from the
/// block's high plane at `q + plane_at`: its byte `4j + t` holds, for every chunk `c`, the
/// high bits of row `j`'s quant `4c + t` at bits `HIGH·c..`, the same byte as the quant's
/// lane in chunk `c`'s register, so one shift and one ternary op merge them per chunk.
/// With `GF`, each byte's high nibble comes down in one GFNI affine transform
/// (`HIGH_NIBBLE`) instead of a shift and a mask: the same bytes, one instruction fewer
/// per 64 quant bytes.
#[inline(always)]
pub(super) unsafe fn weights<
    const NIB: bool,
    const BK: usize,
    const HIGH: usize,
    const GF: bool,
>(
    q: *const u8,
    plane_at: usize,
) -> [__m512i; 8] {
    // SAFETY: `q` points at a whole block's quant bytes (its high plane included);
    // features enabled by the caller.
    unsafe {
        let chunks = BK / 4;
        let mut w = [_mm512_setzero_si512(); 8];
        if NIB {
            let low = _mm512_set1_epi8(0x0F);
            for v in 0..chunks / 2 {
                let raw = _mm512_loadu_si512(q.add(64 * v) as *const __m512i);
                w[v] = _mm512_and_si512(raw, low);
                w[v + chunks / 2] = if GF {
                    _mm512_gf2p8affine_epi64_epi8::<0>(raw, _mm512_set1_epi64(HIGH_NIBBLE))
                } else {
                    _mm512_and_si512(_mm512_srli_epi16(raw, 4), low)
                };
            }
            if HIGH > 0 {
                let plane = _mm512_loadu_si512(q.add(plane_at) as *const __m512i);
                let mask = _mm512_set1_epi8(if HIGH == 1 { 0x10 } else { 0x30 });
                for (c, wc) in w.iter_mut().enumerate().take(chunks) {
                    // Chunk c's bits moved to bit 4 (and 5) of each byte: 16-bit shifts
                    // by at most 4 bring no bit of the neighbouring byte there.
                    let s = 4 - (HIGH * c) as i32;
                    let moved = if s >= 0 {
                        _mm512_sll_epi16(plane, _mm_cvtsi32_si128(s))
                    } else {
                        _mm512_srl_epi16(plane, _mm_cvtsi32_si128(-s))
                    };
                    // nibble | (moved & mask)
                    *wc = _mm512_ternarylogic_epi32::<0xF8>(*wc, moved, mask);
                }
            }
        } else {
            for (c, wc) in w.iter_mut().enumerate().take(chunks) {
                *wc = _mm512_loadu_si512(q.add(64 * c) as *const __m512i);
            }
        }
        w
    }
}

/// One activation row against one block: the block's integer sum (started at `start`:
/// zero, or the folded offset), scaled and added to `acc`, and with `!FOLD` the offset
/// term `mw·s`. Taken and returned by value so the accumulator stays in a register.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn row_block<const BK: usize, const FOLD: bool>(
    lone: bool,
    acc: __m512,
    w: &[__m512i; 8],
    x: *const i32,
    dw: __m512,
    mw: __m512,
    da: f32,
    start: __m512i,
    s: f32,
) -> __m512 {
    // SAFETY: `x` points at the row's BK activation bytes (checked by the caller).
    unsafe {
        // The rows of a tile are independent chains enough; a lone row (decode) splits
        // its sum in two to halve the chain of `vpdpbusd` latencies.
        let mut sum = [start, _mm512_setzero_si512()];
        for (c, wc) in w.iter().enumerate().take(BK / 4) {
            let k = if lone { c % 2 } else { 0 };
            sum[k] = _mm512_dpbusd_epi32(sum[k], *wc, _mm512_set1_epi32(x.add(c).read_unaligned()));
        }
        let sum = if lone {
            _mm512_add_epi32(sum[0], sum[1])
        } else {
            sum[0]
        };
        let acc = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(sum),
            _mm512_mul_ps(dw, _mm512_set1_ps(da)),
            acc,
        );
        if FOLD {
            acc
        } else {
            _mm512_fmadd_ps(mw, _mm512_set1_ps(s), acc)
        }
    }
}

/// `p`, hidden from the optimiser: the tile's reads then address `p + constant`. Left to
/// itself, LLVM derived every pointer from one shared index (`base + 8·index + constant`),
/// and a `vpdpbusd` whose broadcast operand has an indexed address costs the CPU an extra
/// micro-op.
#[inline(always)]
// The asm neither reads nor writes through the pointer: it only passes it along.
#[allow(clippy::pointers_in_nomem_asm_block)]
fn opaque<T>(mut p: *const T) -> *const T {
    // SAFETY: an empty instruction sequence; the pointer comes back unchanged.
    unsafe {
        std::arch::asm!("/* {0} */", inout(reg) p, options(pure, nomem, nostack, preserves_flags))
    };
    p
}

/// Group `g` against the 8 rows of tile `t` (`a.tiles`); with `FOLD`, `fold` is the
/// `FOLDS` entry of the matrix's offset.
#[inline(always)]
unsafe fn tile<
    const NIB: bool,
    const BK: usize,
    const FOLD: bool,
    const HIGH: usize,
    const GF: bool,
>(
    p: &PackedMatrix,
    a: &QuantActs,
    g: usize,
    t: usize,
    fold: usize,
    ex: Option<&Expanded>,
) -> [__m512; TILE] {
    let nb = p.blocks();
    let tiles = &a.tiles;
    let per = TILE * a.cols;
    // SAFETY (whole body): tile `t` exists (checked by `run`), so its quants
    // (`TILE * cols` bytes), scales (`TILE * cols / 32`) and sums or folded offsets
    // (`TILE * nb`) are inside the buffers; the group's blocks are whole; the features
    // are enabled by the caller.
    unsafe {
        let xt = tiles.q.as_ptr().add(t * per);
        let dt = tiles.d.as_ptr().add(t * per / 32);
        let st = tiles.sums(BK).as_ptr().wrapping_add(t * TILE * nb);
        let zt = tiles.z[fold].as_ptr().wrapping_add(t * TILE * nb);
        let group = Group::with(p, g, ex);
        let mut acc = [_mm512_setzero_ps(); TILE];
        for b in 0..nb {
            let w = weights::<NIB, BK, HIGH, GF>(group.quants(b), p.high_plane());
            let (dw, mw) = group.scales::<FOLD>(b);
            // Row k's chunk c of this block: x + 8k + c (in 4-byte words).
            let x = opaque(xt.add(b * BK / 32 * TILE * 32 + b * BK % 32) as *const i32);
            let da = opaque(dt.add(b * BK / 32 * TILE));
            let st = opaque(st.wrapping_add(b * TILE));
            let zt = opaque(zt.wrapping_add(b * TILE));
            macro_rules! row {
                ($k:literal) => {{
                    let start = if FOLD {
                        _mm512_set1_epi32(*zt.add($k))
                    } else {
                        _mm512_setzero_si512()
                    };
                    let s = if FOLD { 0.0 } else { *st.add($k) };
                    acc[$k] = row_block::<BK, FOLD>(
                        false,
                        acc[$k],
                        &w,
                        x.add(8 * $k),
                        dw,
                        mw,
                        *da.add($k),
                        start,
                        s,
                    );
                }};
            }
            // Unrolled by hand so the accumulators stay in registers: as a loop, LLVM
            // kept them on the stack and every block paid a store and a reload per row.
            // A macro, not a closure: a closure does not inherit the caller's target
            // features and was not inlined (25x slower).
            const { assert!(TILE == 8) };
            row!(0);
            row!(1);
            row!(2);
            row!(3);
            row!(4);
            row!(5);
            row!(6);
            row!(7);
        }
        acc
    }
}

/// Writes group `g`'s 16 lanes of activation row `i` to `y`: straight for the groups
/// before `full` (all 16 rows real; copying each through `store` was 1.5% of a SmolLM2
/// prefill), through `PackedMatrix::store` for the last, partial one.
#[inline(always)]
unsafe fn put(
    p: &PackedMatrix,
    full: usize,
    g: usize,
    i: usize,
    v: __m512,
    y: *mut f32,
    stride: usize,
) {
    // SAFETY: in bounds and exclusive by the caller's contract (`matmul_groups_at`).
    unsafe {
        if g < full {
            _mm512_storeu_ps(y.add(i * stride + g * GROUP), v);
            return;
        }
        let mut lanes = [0f32; GROUP];
        _mm512_storeu_ps(lanes.as_mut_ptr(), v);
        p.store(g, i, &lanes, y, stride);
    }
}

#[inline(always)]
pub(super) unsafe fn run<
    const NIB: bool,
    const BK: usize,
    const FOLD: bool,
    const HIGH: usize,
    const GF: bool,
>(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
    fold: usize,
) {
    // SAFETY (whole body): as in `tile` and `lone`; `put` writes inside the caller's range.
    unsafe {
        let full = p.rows() / GROUP;
        let end = part.rows.end;
        // Rows in whole tiles that start where a tile starts.
        let tiled_end = end.min(a.tiles.n * TILE);
        let shift = FOLDS[fold].1;
        // Many rows against factored scales: each group's scales expanded once, not once
        // per tile of 8 rows.
        let tiled = tiled_end.saturating_sub(part.rows.start);
        let mut expanded = Expanded::for_rows(p, tiled);
        for g in part.groups.clone() {
            if let Some(e) = expanded.as_mut() {
                e.fill(p, g);
            }
            let mut i = part.rows.start;
            while i.is_multiple_of(TILE) && i + TILE <= tiled_end {
                let acc =
                    tile::<NIB, BK, FOLD, HIGH, GF>(p, a, g, i / TILE, fold, expanded.as_ref());
                for (k, v) in acc.iter().enumerate() {
                    put(p, full, g, i + k, *v, y, stride);
                }
                i += TILE;
            }
            while i < end {
                let acc = lone::lone::<NIB, BK, FOLD, HIGH, GF>(p, a, g, i, shift);
                put(p, full, g, i, acc, y, stride);
                i += 1;
            }
        }
    }
}

mod lone;
#[cfg(test)]
mod tests;
