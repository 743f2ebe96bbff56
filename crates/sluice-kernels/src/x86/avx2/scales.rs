//! Scale lanes as f32 for the AVX2 matmul: read from f16 or f32 (`lanes256`), from factored
//! scales (`factored256`), or a group's factored scales expanded once for a matmul of many
//! rows (`Expanded`).

use std::arch::x86_64::*;

use crate::layout::{GROUP, PREFETCH_ROWS, PackedMatrix};

/// 8 scale lanes starting at lane `h * 8`.
#[inline(always)]
pub(super) unsafe fn lanes256(p: *const u8, half: bool, h: usize) -> __m256 {
    // SAFETY: `p` holds 16 scales; avx and f16c enabled by the caller.
    unsafe {
        if half {
            _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * h) as *const __m128i))
        } else {
            _mm256_loadu_ps((p as *const f32).add(8 * h))
        }
    }
}

/// 8 lanes starting at lane `h * 8` of factored scales (`PackedMatrix::factored`): i8
/// integers at `sub` times the f16 super-block scales at `sup`, exactly the values the
/// unfactored form stores.
#[inline(always)]
pub(super) unsafe fn factored256(sub: *const u8, sup: *const u8, h: usize) -> __m256 {
    // SAFETY: `sub` holds 16 bytes and `sup` 16 f16; avx2 and f16c enabled by the caller.
    unsafe {
        let ints = _mm256_cvtepi8_epi32(_mm_loadl_epi64(sub.add(8 * h) as *const __m128i));
        let s = _mm256_cvtph_ps(_mm_loadu_si128(sup.add(16 * h) as *const __m128i));
        _mm256_mul_ps(_mm256_cvtepi32_ps(ints), s)
    }
}

/// One group's factored scales and offsets (`PackedMatrix::factored`) as f32 lanes,
/// `[block][16]`: exactly the values the unfactored form stores.
pub(crate) struct Expanded {
    pub(crate) d: Vec<f32>,
    pub(crate) m: Vec<f32>,
}

impl Expanded {
    /// Buffers for `p`'s groups when it is factored and a part of `rows` activation rows
    /// is worth expanding its scales for (more than a decode step's few rows).
    pub(crate) fn for_rows(p: &PackedMatrix, rows: usize) -> Option<Self> {
        (p.factored > 0 && rows > PREFETCH_ROWS).then(|| Self {
            d: vec![0.0; p.blocks() * GROUP],
            m: if p.m_of_d.is_none() {
                vec![0.0; p.blocks() * GROUP]
            } else {
                Vec::new()
            },
        })
    }

    /// Where the expanded scales and offsets start (offsets null when derived from the
    /// scales), laid out as an unfactored f32 packing's lanes.
    pub(crate) fn lanes(&self) -> (*const u8, *const u8) {
        let m = if self.m.is_empty() {
            std::ptr::null()
        } else {
            self.m.as_ptr() as *const u8
        };
        (self.d.as_ptr() as *const u8, m)
    }

    /// Group `g`'s lanes.
    ///
    /// # Safety
    /// `p` is factored and `g` one of its groups; avx2 and f16c enabled by the caller.
    #[inline(always)]
    pub(crate) unsafe fn fill(&mut self, p: &PackedMatrix, g: usize) {
        let (d0, m0) = p.scales(g, 0);
        let (ds0, ms0) = p.supers(g, 0);
        // SAFETY: every block's 16 i8 lanes and its super-block's 16 f16 lanes are inside
        // the packing; the buffers hold `blocks() * GROUP` lanes.
        unsafe {
            for b in 0..p.blocks() {
                let (at, sup) = (b * GROUP, b / p.factored * GROUP * 2);
                for h in 0..2 {
                    let v = factored256(d0.add(at), ds0.add(sup), h);
                    _mm256_storeu_ps(self.d.as_mut_ptr().add(at + 8 * h), v);
                    if !self.m.is_empty() {
                        let v = factored256(m0.add(at), ms0.add(sup), h);
                        _mm256_storeu_ps(self.m.as_mut_ptr().add(at + 8 * h), v);
                    }
                }
            }
        }
    }
}
