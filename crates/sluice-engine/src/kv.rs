//! The KV cache slab: allocated once at start-up, written in place by every step
//! (docs/ARCHITECTURE.md, "The KV slab").
//! Keys and values are stored as f16 (as llama.cpp does by default): attention at many
//! streams is bound by reading them, and f16 halves that traffic.

use half::f16;
use half::slice::HalfFloatSliceExt;
use sluice_kernels::{KEY_BLOCK, key_index};

/// One token to run: which slot it belongs to and its position in that sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenRow {
    /// Token id.
    pub token: u32,
    /// KV slot of its sequence.
    pub slot: usize,
    /// Position in the sequence (RoPE angle and KV index), counting real tokens only.
    pub pos: usize,
}

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
        let n = self.per_slot();
        let (keys, values) = (&mut self.keys[layer], &mut self.values[layer]);
        let at = slot * n..(slot + 1) * n;
        write_position(
            (&mut keys[at.clone()], &mut values[at]),
            (self.kv_heads, self.head_dim, self.stride),
            pos,
            k,
            v,
        );
    }

    /// Writes the keys and values of every row of a step for a layer (`k`, `v`: one row of
    /// all KV heads per row of `rows`), slots in parallel.
    pub fn write_rows(&mut self, layer: usize, rows: &[TokenRow], k: &[f32], v: &[f32]) {
        let (shape, n) = ((self.kv_heads, self.head_dim, self.stride), self.per_slot());
        let width = self.kv_heads * self.head_dim;
        // Row indices by slot: each task owns one slot's region of the layer.
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| rows[i].slot);
        let groups: Vec<&[usize]> = order
            .chunk_by(|&a, &b| rows[a].slot == rows[b].slot)
            .collect();
        // Each group with its slot's regions: `groups` holds each slot once, in slot order.
        let mut regions = self.keys[layer]
            .chunks_mut(n)
            .zip(self.values[layer].chunks_mut(n));
        let mut work = Vec::with_capacity(groups.len());
        let mut next = 0;
        for g in groups {
            let slot = rows[g[0]].slot;
            let region = regions
                .nth(slot - next)
                .expect("a row's slot is in the slab");
            next = slot + 1;
            work.push((g, region));
        }
        sluice_kernels::threads::for_each_item(&mut work, |_, (group, (keys, values))| {
            for &i in group.iter() {
                let (k, v) = (&k[i * width..][..width], &v[i * width..][..width]);
                write_position((&mut **keys, &mut **values), shape, rows[i].pos, k, v);
            }
        });
    }

    /// Elements of one slot's keys (or values) in a layer.
    fn per_slot(&self) -> usize {
        self.kv_heads * self.stride * self.head_dim
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

/// Writes position `pos` of one slot's keys and values (`region`: the slot's part of a
/// layer, `[kv_heads][stride * head_dim]` each) from `k` and `v` (all KV heads).
fn write_position(
    region: (&mut [f16], &mut [f16]),
    (kv_heads, hd, stride): (usize, usize, usize),
    pos: usize,
    k: &[f32],
    v: &[f32],
) {
    let (keys, values) = region;
    for h in 0..kv_heads {
        let keys = &mut keys[h * stride * hd..(h + 1) * stride * hd];
        let mut kh = [f16::ZERO; 256];
        let kh = &mut kh[..hd];
        kh.convert_from_f32_slice(&k[h * hd..(h + 1) * hd]);
        for (d, kd) in kh.iter().enumerate() {
            keys[key_index(hd, d, pos)] = *kd;
        }
        let o = (h * stride + pos) * hd;
        values[o..o + hd].convert_from_f32_slice(&v[h * hd..(h + 1) * hd]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_write_equals_each_row_written_alone() {
        // Decode rows of six slots in no order (enough to run in parallel), then a
        // prompt's rows of one more slot crossing a key block, every element distinct.
        let (kvh, hd, context) = (2, 8, 40);
        let mut rows: Vec<TokenRow> = [5, 0, 3, 1, 6, 2]
            .iter()
            .map(|&slot| TokenRow {
                token: 0,
                slot,
                pos: 3 * slot + 1,
            })
            .collect();
        rows.extend((14..19).map(|pos| TokenRow {
            token: 0,
            slot: 4,
            pos,
        }));
        let width = kvh * hd;
        let k: Vec<f32> = (0..rows.len() * width).map(|i| i as f32).collect();
        let v: Vec<f32> = k.iter().map(|x| -x - 1.0).collect();
        let (mut batch, mut alone) = (
            KvSlab::new(2, kvh, hd, 7, context),
            KvSlab::new(2, kvh, hd, 7, context),
        );
        batch.write_rows(1, &rows, &k, &v);
        for (i, r) in rows.iter().enumerate() {
            let at = i * width..(i + 1) * width;
            alone.write(1, r.slot, r.pos, &k[at.clone()], &v[at]);
        }
        for layer in 0..2 {
            for slot in 0..7 {
                for h in 0..kvh {
                    let (a, b) = (
                        batch.read(layer, slot, h, context),
                        alone.read(layer, slot, h, context),
                    );
                    assert_eq!(a, b, "layer {layer} slot {slot} head {h}");
                }
            }
        }
        let (k4, _) = batch.read(1, 4, 1, context);
        assert_eq!(
            k4[key_index(hd, 3, 16)].to_f32(),
            (8 * width + hd + 3) as f32
        );
    }

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
