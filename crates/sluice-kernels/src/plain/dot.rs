//! The plain loop of the f32 dot product (`simd.rs` dispatches), which every level compiles.

/// Lane-wise accumulation into 32 independent sums, so the compiler can keep them in
/// vector registers without reassociating floating-point adds.
#[inline(always)]
pub(crate) fn dot_body(a: &[f32], b: &[f32], fma: impl Fn(f32, f32, f32) -> f32) -> f32 {
    const W: usize = 32;
    let mut acc = [0f32; W];
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut ca = a.chunks_exact(W);
    let mut cb = b.chunks_exact(W);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for j in 0..W {
            acc[j] = fma(x[j], y[j], acc[j]);
        }
    }
    let mut tail = 0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail = fma(*x, *y, tail);
    }
    let mut half = [0f32; 16];
    for j in 0..16 {
        half[j] = acc[j] + acc[j + 16];
    }
    half.iter().sum::<f32>() + tail
}
