//! The 256-bit `vpdpbusd` of the AVX2 matmul (`matmul.rs`, `layout::vnni256`): 8 lanes
//! each add 4 products of unsigned weight bytes and signed activation bytes, exactly, in
//! one instruction where AVX2 alone takes a `vpmaddubsw`, a `vpmaddwd` and an add.
//!
//! It is written in `asm!` so that the rest of the kernel is compiled with AVX2 alone (16
//! registers, no AVX-512 instruction) whichever form runs: the VEX form (AVX-VNNI) on the
//! AVX2-only CPUs that have it, the EVEX form on a CPU with AVX-512 VNNI and VL, where the
//! AVX2 level then stands for such a CPU.

use std::arch::x86_64::__m256i;

use super::matmul::run256;
use crate::layout::{PackedMatrix, Part, QuantActs, VNNI_NONE, VNNI_VEX, vnni256};

/// `acc + Σ₄ w·x` per 32-bit lane, `w` unsigned and `x` signed bytes, in the form `V`
/// (`layout::VNNI_EVEX` or `VNNI_VEX`).
///
/// # Safety
/// The CPU has the form's feature (`layout::set_avx2_vnni` chose it), and AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn dpbusd<const V: u8>(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    let mut acc = acc;
    // SAFETY: one register-only instruction the CPU has (the caller's contract).
    unsafe {
        if V == VNNI_VEX {
            std::arch::asm!(
                "{{vex}} vpdpbusd {acc}, {w}, {x}",
                acc = inout(ymm_reg) acc,
                w = in(ymm_reg) w,
                x = in(ymm_reg) x,
                options(pure, nomem, nostack, preserves_flags)
            );
        } else {
            std::arch::asm!(
                "vpdpbusd {acc}, {w}, {x}",
                acc = inout(ymm_reg) acc,
                w = in(ymm_reg) w,
                x = in(ymm_reg) x,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
    }
    acc
}

/// Calls of `packed_groups` with a `vpdpbusd` form in force (the tests check it ran).
#[cfg(test)]
pub(crate) static VNNI_CALLS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// The AVX2 kernel for one part of a matmul, with the `vpdpbusd` form in force
/// (`layout::vnni256`).
///
/// # Safety
/// As `groups_avx512`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn packed_groups(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
) {
    #[cfg(test)]
    if vnni256() != VNNI_NONE {
        VNNI_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: forwarded; `vnni256` names a form only where the CPU has it.
    unsafe {
        // The fuzz build (`scripts/fuzz`, `--cfg fuzzing`) compiles the path without
        // `vpdpbusd` alone: the same bits, and a third of the instrumented code to build.
        match vnni256() {
            #[cfg(not(fuzzing))]
            VNNI_VEX => by_layout::<VNNI_VEX>(p, a, part, y, stride),
            #[cfg(not(fuzzing))]
            crate::layout::VNNI_EVEX => {
                by_layout::<{ crate::layout::VNNI_EVEX }>(p, a, part, y, stride)
            }
            _ => by_layout::<VNNI_NONE>(p, a, part, y, stride),
        }
    }
}

/// `packed_groups` compiled for the matrix's layout and the `vpdpbusd` form `V`.
#[inline(always)]
unsafe fn by_layout<const V: u8>(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
) {
    // The shift of a derived offset the integer sum takes (`tile`), 0 for none.
    let fold = crate::layout::folded_shift(p);
    // SAFETY: forwarded.
    unsafe {
        match (p.nibbles, p.bk, p.wide, p.signed, p.bits, fold) {
            (true, 32, _, _, 4, 3) => {
                run256::<true, 32, false, false, 4, 3, V>(p, a, part, y, stride)
            }
            (true, 32, _, _, 4, _) => {
                run256::<true, 32, false, false, 4, 0, V>(p, a, part, y, stride)
            }
            (true, 32, _, _, 5, 4) => {
                run256::<true, 32, false, false, 5, 4, V>(p, a, part, y, stride)
            }
            (true, 32, _, _, 5, _) => {
                run256::<true, 32, false, false, 5, 0, V>(p, a, part, y, stride)
            }
            (true, 16, _, _, 6, 5) => {
                run256::<true, 16, false, false, 6, 5, V>(p, a, part, y, stride)
            }
            (true, 16, _, _, 6, _) => {
                run256::<true, 16, false, false, 6, 0, V>(p, a, part, y, stride)
            }
            (false, 32, false, true, _, _) => {
                run256::<false, 32, false, true, 8, 0, V>(p, a, part, y, stride)
            }
            (false, 32, false, false, 5, 4) => {
                run256::<false, 32, false, false, 5, 4, V>(p, a, part, y, stride)
            }
            (false, 32, false, false, 5, _) => {
                run256::<false, 32, false, false, 5, 0, V>(p, a, part, y, stride)
            }
            (false, 32, false, false, _, _) => {
                run256::<false, 32, false, false, 6, 0, V>(p, a, part, y, stride)
            }
            (false, 32, true, _, _, _) => {
                run256::<false, 32, true, false, 8, 0, V>(p, a, part, y, stride)
            }
            (false, 16, _, _, _, 5) => {
                run256::<false, 16, false, false, 6, 5, V>(p, a, part, y, stride)
            }
            (false, 16, _, _, _, _) => {
                run256::<false, 16, false, false, 6, 0, V>(p, a, part, y, stride)
            }
            other => unreachable!("layout {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests;
