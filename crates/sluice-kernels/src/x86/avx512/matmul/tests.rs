//! Tests of `matmul.rs`: the two ways of splitting nibbles give the same bytes.

use super::*;

/// A block's chunk registers as bytes, split one way or the other.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn split<const BK: usize, const HIGH: usize, const GF: bool>(q: &[u8]) -> Vec<u8> {
    // SAFETY: `q` holds a whole block (checked by the caller); features enabled.
    let w = unsafe { weights::<true, BK, HIGH, GF>(q.as_ptr(), BK / 8 * 64) };
    w.iter()
        .take(BK / 4)
        .flat_map(|r| {
            let mut b = [0u8; 64];
            // SAFETY: 64 bytes written to a 64-byte array.
            unsafe { _mm512_storeu_si512(b.as_mut_ptr() as *mut __m512i, *r) };
            b
        })
        .collect()
}

#[test]
#[cfg_attr(not(cpu_gfni), ignore = "this CPU lacks AVX-512 with GFNI")]
fn the_gfni_nibble_split_gives_the_shift_and_mask_bytes() {
    assert!(
        std::is_x86_feature_detected!("gfni"),
        "built for GFNI, but this CPU lacks it"
    );
    // Every byte value in every position, and a high plane of every pattern.
    let q: Vec<u8> = (0..512).map(|i| (i * 37 + i / 256) as u8).collect();
    // SAFETY: 512 bytes cover the largest block with its high plane; the CPU has the
    // features (asserted above and by `cpu_gfni`).
    unsafe {
        assert_eq!(split::<32, 0, true>(&q), split::<32, 0, false>(&q));
        assert_eq!(split::<32, 1, true>(&q), split::<32, 1, false>(&q));
        assert_eq!(split::<16, 2, true>(&q), split::<16, 2, false>(&q));
        // And it is the nibbles: chunk 0's bytes are the low ones, chunk BK/8's the high.
        let w = split::<32, 0, true>(&q);
        assert!((0..64).all(|i| w[i] == q[i] & 15 && w[4 * 64 + i] == q[i] >> 4));
    }
}
