//! The KV cache slab: allocated once at start-up, written in place by every step
//! (docs/ARCHITECTURE.md, "The KV slab").
//! Keys and values are stored as f16 (as llama.cpp does by default): attention at many
//! streams is bound by reading them, and f16 halves that traffic.

use half::f16;
use half::slice::HalfFloatSliceExt;
use sluice_kernels::{KEY_BLOCK, key_index};

/// `n` f16 zeros on fresh anonymous pages, which the OS backs only when first written: an
/// idle slab costs address space, not memory. (A heap allocation, even a zeroed one, may
/// reuse pages freed while loading the model, which the allocator then zeroes by writing
/// every byte; `vec![f16::ZERO; n]` writes every element.)
struct Zeroed {
    map: memmap2::MmapMut,
    len: usize,
}

impl Zeroed {
    fn new(len: usize) -> Self {
        let map = memmap2::MmapMut::map_anon((2 * len).max(2))
            .unwrap_or_else(|e| panic!("cannot reserve {} bytes for the KV slab: {e}", 2 * len));
        Self { map, len }
    }
}

impl std::ops::Deref for Zeroed {
    type Target = [f16];
    fn deref(&self) -> &[f16] {
        use half::slice::HalfBitsSliceExt;
        bytemuck::cast_slice::<u8, u16>(&self.map[..2 * self.len]).reinterpret_cast()
    }
}

impl std::ops::DerefMut for Zeroed {
    fn deref_mut(&mut self) -> &mut [f16] {
        use half::slice::HalfBitsSliceExt;
        bytemuck::cast_slice_mut::<u8, u16>(&mut self.map[..2 * self.len]).reinterpret_cast_mut()
    }
}

/// Keys and values for every layer, slot, KV head and position.
///
/// Layout per layer and (slot, kv_head): keys transposed in blocks of `KEY_BLOCK` (16)
/// positions, `[stride / 16][head_dim][16]` (`stride` is the context rounded up to 16 so
/// that kernels may read whole vectors), so the scores of many positions are one vector
/// multiply-add per key dimension, and one position's keys, written or read, lie in one
/// contiguous block rather than `head_dim` rows a context apart; values
/// `[position][head_dim]`, so the weighted sum adds whole rows. Attention reads only a
/// slot's own live prefix of each, without gathering or masks.
pub struct KvSlab {
    /// Number of slots (concurrent sequences).
    pub slots: usize,
    /// Positions per slot.
    pub context: usize,
    /// Positions per (slot, head) key array: `context` rounded up to a multiple of 16.
    pub stride: usize,
    kv_heads: usize,
    head_dim: usize,
    keys: Vec<Zeroed>,
    values: Vec<Zeroed>,
}

impl KvSlab {
    /// Allocates the whole slab. Pages are zero-filled lazily by the OS, so resident
    /// memory grows with the positions actually used.
    pub fn new(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        slots: usize,
        context: usize,
    ) -> Self {
        assert!(head_dim <= 256, "head dimension {head_dim} above 256");
        let stride = context.next_multiple_of(16);
        let per_layer = slots * kv_heads * stride * head_dim;
        Self {
            slots,
            context,
            stride,
            kv_heads,
            head_dim,
            keys: (0..layers).map(|_| Zeroed::new(per_layer)).collect(),
            values: (0..layers).map(|_| Zeroed::new(per_layer)).collect(),
        }
    }

    /// Bytes reserved by the slab.
    pub fn bytes(&self) -> usize {
        2 * self.keys.len() * self.keys.first().map_or(0, |k| k.len()) * 2
    }

    /// Address of the first layer's keys: unchanged for the slab's lifetime (tests use it
    /// to show the slab is never reallocated).
    pub fn base_ptr(&self) -> usize {
        self.keys.first().map_or(0, |k| k.as_ptr() as usize)
    }

    fn offset(&self, slot: usize, head: usize, pos: usize) -> usize {
        ((slot * self.kv_heads + head) * self.stride + pos) * self.head_dim
    }

    /// Writes one position's keys and values (all KV heads, concatenated) for a layer.
    pub fn write(&mut self, layer: usize, slot: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (hd, stride) = (self.head_dim, self.stride);
        for h in 0..self.kv_heads {
            let base = self.offset(slot, h, 0);
            let keys = &mut self.keys[layer][base..base + hd * stride];
            let mut kh = [f16::ZERO; 256];
            let kh = &mut kh[..hd];
            kh.convert_from_f32_slice(&k[h * hd..(h + 1) * hd]);
            for (d, kd) in kh.iter().enumerate() {
                keys[key_index(hd, d, pos)] = *kd;
            }
            let o = self.offset(slot, h, pos);
            self.values[layer][o..o + hd].convert_from_f32_slice(&v[h * hd..(h + 1) * hd]);
        }
    }

    /// One slot and head: its transposed keys (`stride` positions in the block layout
    /// above, of which `0..len` are live) and the values of positions `0..len`.
    pub fn read(&self, layer: usize, slot: usize, head: usize, len: usize) -> (&[f16], &[f16]) {
        let o = self.offset(slot, head, 0);
        (
            &self.keys[layer][o..o + self.head_dim * self.stride],
            &self.values[layer][o..o + len * self.head_dim],
        )
    }

    /// Copies positions `0..len` of slot `from` into slot `to`, every layer and head, in
    /// place (prefix reuse and shared prefills: docs/ARCHITECTURE.md, "Prefix reuse").
    /// Positions `len..` of `to` are left as they were, so a copy never touches what a
    /// later write will own.
    pub fn copy_prefix(&mut self, from: usize, to: usize, len: usize) {
        assert!(
            from != to && len <= self.context,
            "copy_prefix({from}, {to}, {len})"
        );
        let hd = self.head_dim;
        for layer in 0..self.keys.len() {
            for h in 0..self.kv_heads {
                let (src, dst) = (self.offset(from, h, 0), self.offset(to, h, 0));
                let keys = &mut self.keys[layer];
                // Whole blocks at once, then the positions of the last, partial block.
                let full = len / KEY_BLOCK * KEY_BLOCK;
                keys.copy_within(src..src + full * hd, dst);
                for d in 0..hd {
                    for p in full..len {
                        keys[dst + key_index(hd, d, p)] = keys[src + key_index(hd, d, p)];
                    }
                }
                self.values[layer].copy_within(src..src + len * hd, dst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_prefix_copies_only_the_prefix_of_every_layer_and_head() {
        // 21 positions: one whole key block and 5 of the next.
        let (context, len) = (40, 21);
        let mut kv = KvSlab::new(2, 2, 4, 3, context);
        let row = |x: f32| vec![x; 8];
        for layer in 0..2 {
            for pos in 0..context {
                kv.write(
                    layer,
                    0,
                    pos,
                    &row(pos as f32 + 1.0),
                    &row(-(pos as f32) - 1.0),
                );
                kv.write(layer, 2, pos, &row(100.0), &row(100.0));
            }
        }
        kv.copy_prefix(0, 2, len);
        for layer in 0..2 {
            for h in 0..2 {
                let (k, v) = kv.read(layer, 2, h, context);
                for pos in 0..context {
                    let want = if pos < len { pos as f32 + 1.0 } else { 100.0 };
                    for d in 0..4 {
                        assert_eq!(k[key_index(4, d, pos)].to_f32(), want);
                    }
                    let want = if pos < len { -want } else { 100.0 };
                    assert!(v[pos * 4..pos * 4 + 4].iter().all(|x| x.to_f32() == want));
                }
            }
        }
    }
}
