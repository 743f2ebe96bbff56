//! The portable matmul of `PackedMatrix`: plain loops over unpacked blocks, the
//! definition the SIMD kernels follow (`x86/avx2/matmul.rs`, `x86/avx512/matmul.rs`).

use crate::layout::{GROUP, PackedMatrix, Part, QuantActs, folded_shift};

/// Plain Rust: the definition the SIMD paths follow.
///
/// # Safety
/// As `PackedMatrix::matmul_groups`.
pub(crate) unsafe fn groups(
    p: &PackedMatrix,
    a: &QuantActs,
    part: Part,
    y: *mut f32,
    stride: usize,
) {
    let (bk, nb, cols) = (p.bk, p.blocks(), p.cols());
    let sums = a.sums(bk);
    // A derived offset taken inside the integer sum (as the SIMD kernels do).
    let fold = folded_shift(p);
    let shift = if fold > 0 { 1i32 << fold } else { 0 };
    let mut u = vec![0u8; GROUP * bk];
    let mut acc = vec![[0f32; GROUP]; part.rows.len()];
    for g in part.groups {
        acc.iter_mut().for_each(|x| *x = [0.0; GROUP]);
        for b in 0..nb {
            p.unpack(g, b, &mut u);
            let dw: [f32; GROUP] = std::array::from_fn(|j| p.scale_of(g, b, j));
            let mw: [f32; GROUP] = std::array::from_fn(|j| p.offset_at(g, b, j));
            for (i, acc) in part.rows.clone().zip(acc.iter_mut()) {
                let xq = &a.q[i * cols + b * bk..][..bk];
                let da = a.d[(i * cols + b * bk) / 32];
                let s = sums[i * nb + b];
                for j in 0..GROUP {
                    let isum: i32 = u[j * bk..(j + 1) * bk]
                        .iter()
                        .zip(xq)
                        .map(|(&w, &x)| (p.value(w) - shift) * x as i32)
                        .sum();
                    acc[j] += isum as f32 * (dw[j] * da);
                    if fold == 0 {
                        acc[j] += mw[j] * s;
                    }
                }
            }
        }
        for (i, lanes) in part.rows.clone().zip(&acc) {
            // SAFETY: the caller's contract.
            unsafe { p.store(g, i, lanes, y, stride) };
        }
    }
}
