//! The KV cache slab: allocated once at start-up, written in place by every step
//! (docs/ARCHITECTURE.md, "The KV slab").
//! Keys and values are stored as f16 (as llama.cpp does by default): attention at many
//! streams is bound by reading them, and f16 halves that traffic.

use half::f16;
use half::slice::HalfFloatSliceExt;
use sluice_kernels::{Attn, KEY_BLOCK, key_index};

/// Bytes of keys and values a decode step's attention asks for ahead (`KvSlab::prefetch`):
/// 256 KB, an eighth of a 2 MB L2.
const PREFETCH_BYTES: usize = 256 << 10;

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

/// Keys and values for every layer in one pool of blocks of `KEY_BLOCK` (16) positions,
/// and each slot's block table (docs/ARCHITECTURE.md, "The KV pool").
///
/// Layout per layer: `[kv_head][block][16 * head_dim]`. Within a block and head, keys are
/// transposed, `[head_dim][16]`, so the scores of 16 positions are one vector multiply-add
/// per key dimension and one position's keys lie in one contiguous block; values are
/// `[16][head_dim]`, so the weighted sum adds whole rows. Heads outermost: attention reads
/// one head of a sequence at a time, and a sequence's consecutive blocks (a prompt's are)
/// are then one contiguous stream, which the hardware prefetcher follows; with blocks
/// outermost, each head's 2 KB of a block sat between the other heads' and a step of 32
/// streams read its keys and values 40% slower. A sequence's positions
/// `16b..16b + 16` live in block `tables[slot][b]`: attention reads through the table, and
/// blocks may be shared by several tables (a prompt prefix, the choices of `n`, beams).
/// Who holds which block is decided by `cache::KvCache`; this type only stores.
pub struct KvSlab {
    /// Blocks in the pool.
    pub blocks: usize,
    kv_heads: usize,
    head_dim: usize,
    keys: Vec<Zeroed>,
    values: Vec<Zeroed>,
    /// Each slot's block table.
    tables: Vec<Vec<u32>>,
}

/// One slot and KV head of one layer, as attention reads it: the layer's pools offset to
/// the head, the slot's block table, and the distance between blocks.
pub struct HeadView<'a> {
    /// Keys: block `t` of the table at `keys[t * block_stride..]`, `[head_dim][16]`.
    pub keys: &'a [f16],
    /// Values: block `t` at `values[t * block_stride..]`, `[16][head_dim]`.
    pub values: &'a [f16],
    /// The slot's block table (at least the blocks of the positions read).
    pub table: &'a [u32],
    /// Elements from one block to the next.
    pub block_stride: usize,
}

impl<'a> HeadView<'a> {
    /// Attention of one query group `q` (`g x hd`) over this view's positions `0..len`,
    /// or their last `window`, scores scaled by `scale` and soft-capped by `softcap`.
    pub fn attn(
        &self,
        q: &'a [f32],
        hd: usize,
        len: usize,
        scale: f32,
        window: Option<usize>,
        softcap: Option<f32>,
    ) -> Attn<'a> {
        Attn {
            q,
            hd,
            keys: self.keys,
            values: self.values,
            table: self.table,
            block_stride: self.block_stride,
            len,
            scale,
            start: window.map_or(0, |w| len.saturating_sub(w)),
            softcap,
        }
    }
}

impl KvSlab {
    /// Allocates a pool of `blocks` blocks for `slots` block tables, all empty. Pages are
    /// zero-filled lazily by the OS, so resident memory grows with the blocks written.
    pub fn new(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        slots: usize,
        blocks: usize,
    ) -> Self {
        assert!(head_dim <= 256, "head dimension {head_dim} above 256");
        assert!(blocks <= u32::MAX as usize, "{blocks} blocks");
        let per_layer = kv_heads * blocks * KEY_BLOCK * head_dim;
        Self {
            blocks,
            kv_heads,
            head_dim,
            keys: (0..layers).map(|_| Zeroed::new(per_layer)).collect(),
            values: (0..layers).map(|_| Zeroed::new(per_layer)).collect(),
            tables: vec![Vec::new(); slots],
        }
    }

    /// Asks the OS to back the pool with transparent huge pages (`--kv-huge-pages`), before
    /// anything is written to it. A 32-stream step's decode attention took 3-14% less time
    /// on them (`SLUICE_BENCH_ONLY=attention cargo bench --bench kernels`, slab table), but a
    /// 2 MB page holds 1024 blocks of one head, so the first request makes 2 MB per layer,
    /// keys and values, and head resident (360 MB for SmolLM2), not a few KB: opt-in.
    /// Only advice: where huge pages are off, nothing changes.
    pub fn advise_huge_pages(&self) {
        #[cfg(target_os = "linux")]
        for z in self.keys.iter().chain(&self.values) {
            let _ = z.map.advise(memmap2::Advice::HugePage);
        }
    }

    /// A pool of `slots x context` positions where slot `s` holds blocks
    /// `s * n..(s + 1) * n` in order (`n = context / 16`, rounded up): a fixed layout for
    /// tests and benchmarks that run the model without an engine.
    pub fn contiguous(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        slots: usize,
        context: usize,
    ) -> Self {
        let n = context.div_ceil(KEY_BLOCK);
        let mut kv = Self::new(layers, kv_heads, head_dim, slots, slots * n);
        for (s, t) in kv.tables.iter_mut().enumerate() {
            *t = (s * n..(s + 1) * n).map(|b| b as u32).collect();
        }
        kv
    }

    /// Bytes reserved by the pool.
    pub fn bytes(&self) -> usize {
        2 * self.keys.len() * self.keys.first().map_or(0, |k| k.len()) * 2
    }

    /// Address of the first layer's keys: unchanged for the pool's lifetime (tests use it
    /// to show the pool is never reallocated).
    pub fn base_ptr(&self) -> usize {
        self.keys.first().map_or(0, |k| k.as_ptr() as usize)
    }

    /// Elements of one block of one KV head in a layer's keys or values: the distance
    /// from one block of a head to the next.
    pub fn block_stride(&self) -> usize {
        KEY_BLOCK * self.head_dim
    }

    /// Elements of one KV head's part of a layer (all its blocks).
    fn head_stride(&self) -> usize {
        self.blocks * self.block_stride()
    }

    /// Slot `slot`'s block table.
    pub fn table(&self, slot: usize) -> &[u32] {
        &self.tables[slot]
    }

    /// Slot `slot`'s block table, to change (`cache::KvCache` only).
    pub(crate) fn table_mut(&mut self, slot: usize) -> &mut Vec<u32> {
        &mut self.tables[slot]
    }

    /// Where position `pos` of `slot` lives: its block, and its index in the block.
    fn locate(&self, slot: usize, pos: usize) -> (usize, usize) {
        let table = &self.tables[slot];
        let b = *table.get(pos / KEY_BLOCK).unwrap_or_else(|| {
            panic!(
                "slot {slot} has {} blocks: no room for position {pos}",
                table.len()
            )
        });
        (b as usize, pos % KEY_BLOCK)
    }

    /// Writes one position's keys and values (all KV heads, concatenated) for a layer.
    pub fn write(&mut self, layer: usize, slot: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (b, i) = self.locate(slot, pos);
        let (n, hs, hd) = (self.block_stride(), self.head_stride(), self.head_dim);
        let (keys, values) = (&mut self.keys[layer], &mut self.values[layer]);
        for h in 0..self.kv_heads {
            let at = h * hs + b * n..h * hs + (b + 1) * n;
            let (k, v) = (&k[h * hd..(h + 1) * hd], &v[h * hd..(h + 1) * hd]);
            write_position((&mut keys[at.clone()], &mut values[at]), hd, i, k, v);
        }
    }

    /// Writes the keys and values of every row of a step for a layer (`k`, `v`: one row of
    /// all KV heads per row of `rows`), blocks in parallel. No two rows may write the same
    /// position; rows of different slots never share a block here (`KvCache::reserve`
    /// copies a shared block before anyone writes into it).
    pub fn write_rows(&mut self, layer: usize, rows: &[TokenRow], k: &[f32], v: &[f32]) {
        let (n, hd, kvh) = (self.block_stride(), self.head_dim, self.kv_heads);
        let width = kvh * hd;
        let at: Vec<(usize, usize)> = rows.iter().map(|r| self.locate(r.slot, r.pos)).collect();
        // Row indices by block: each task owns one block of the layer (in every head).
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| at[i].0);
        let groups: Vec<&[usize]> = order.chunk_by(|&a, &b| at[a].0 == at[b].0).collect();
        // Each group with its block's region in every head: `groups` holds each block
        // once, in block order, and each head's blocks are taken in that order.
        let hs = self.head_stride();
        let mut heads: Vec<_> = self.keys[layer]
            .chunks_mut(hs)
            .zip(self.values[layer].chunks_mut(hs))
            .map(|(k, v)| k.chunks_mut(n).zip(v.chunks_mut(n)))
            .collect();
        let mut work = Vec::with_capacity(groups.len());
        let mut next = 0;
        for g in groups {
            let block = at[g[0]].0;
            let regions: Vec<(&mut [f16], &mut [f16])> = heads
                .iter_mut()
                .map(|h| h.nth(block - next).expect("a row's block is in the pool"))
                .collect();
            next = block + 1;
            work.push((g, regions));
        }
        let at = &at;
        sluice_kernels::threads::for_each_item(&mut work, |_, (group, regions)| {
            for &i in group.iter() {
                for (h, (keys, values)) in regions.iter_mut().enumerate() {
                    let o = i * width + h * hd;
                    let (k, v) = (&k[o..o + hd], &v[o..o + hd]);
                    write_position((&mut **keys, &mut **values), hd, at[i].1, k, v);
                }
            }
        });
    }

    /// One slot and head of a layer, for attention over its first `len` positions (the
    /// whole table: rows of one slot at different lengths share it, as a tile needs).
    pub fn read(&self, layer: usize, slot: usize, head: usize, len: usize) -> HeadView<'_> {
        let table = &self.tables[slot];
        let used = len.div_ceil(KEY_BLOCK);
        assert!(
            used <= table.len(),
            "slot {slot}: {len} positions, {} blocks",
            table.len()
        );
        let o = head * self.head_stride()..(head + 1) * self.head_stride();
        HeadView {
            keys: &self.keys[layer][o.clone()],
            values: &self.values[layer][o],
            table,
            block_stride: self.block_stride(),
        }
    }

    /// Asks for the keys and values that attention of `rows` in layer `layer` reads
    /// (each row's positions `0..=pos`, or its last `window`, every head) to be fetched
    /// into cache, from its first block on, up to `PREFETCH_BYTES` in all: a long context
    /// is read by parallel attention whose kernels prefetch as they go, and would only
    /// push this thread's cache out.
    pub fn prefetch(&self, layer: usize, rows: &[TokenRow], window: Option<usize>) {
        let (n, hs) = (self.block_stride(), self.head_stride());
        let per_block = 2 * n * self.kv_heads * std::mem::size_of::<f16>();
        let mut budget = PREFETCH_BYTES / per_block.max(1);
        for r in rows {
            let len = r.pos + 1;
            let start = window.map_or(0, |w| len.saturating_sub(w)) / KEY_BLOCK;
            let end = len.div_ceil(KEY_BLOCK);
            let blocks = self.tables[r.slot].get(start..end).unwrap_or_default();
            for &b in blocks.iter().take(budget) {
                for h in 0..self.kv_heads {
                    let at = h * hs + b as usize * n;
                    sluice_kernels::prefetch(&self.keys[layer][at..at + n]);
                    sluice_kernels::prefetch(&self.values[layer][at..at + n]);
                }
            }
            budget = budget.saturating_sub(blocks.len());
        }
    }

    /// Copies block `from` into block `to`, every layer and head (copy-on-write).
    pub(crate) fn copy_block(&mut self, from: u32, to: u32) {
        let (n, hs) = (self.block_stride(), self.head_stride());
        for layer in 0..self.keys.len() {
            for h in 0..self.kv_heads {
                let (from, to) = (h * hs + from as usize * n, h * hs + to as usize * n);
                self.keys[layer].copy_within(from..from + n, to);
                self.values[layer].copy_within(from..from + n, to);
            }
        }
    }
}

/// Writes position `i` of one block of one KV head (`region`: that block's keys and
/// values, `16 * hd` each) from `k` and `v` (that head's `hd` elements).
fn write_position(region: (&mut [f16], &mut [f16]), hd: usize, i: usize, k: &[f32], v: &[f32]) {
    let (keys, values) = region;
    let mut kh = [f16::ZERO; 256];
    let kh = &mut kh[..hd];
    kh.convert_from_f32_slice(k);
    for (d, kd) in kh.iter().enumerate() {
        keys[key_index(hd, d, i)] = *kd;
    }
    values[i * hd..(i + 1) * hd].convert_from_f32_slice(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dimension `d` of position `pos` of `slot`'s head `h`: (key, value), read through
    /// the table.
    fn at(kv: &KvSlab, layer: usize, slot: usize, h: usize, pos: usize, d: usize) -> (f32, f32) {
        let view = kv.read(layer, slot, h, pos + 1);
        let base = view.table[pos / KEY_BLOCK] as usize * view.block_stride;
        let hd = kv.head_dim;
        (
            view.keys[base + key_index(hd, d, pos % KEY_BLOCK)].to_f32(),
            view.values[base + (pos % KEY_BLOCK) * hd + d].to_f32(),
        )
    }

    #[test]
    fn a_batch_write_equals_each_row_written_alone_through_shuffled_tables() {
        // Decode rows of six slots in no order (enough to run in parallel), then a
        // prompt's rows of one more slot crossing a block, every element distinct; the
        // slots' blocks interleave in the pool.
        let (kvh, hd, per) = (2, 8, 3);
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
        let tables = |kv: &mut KvSlab| {
            for s in 0..7 {
                // Block b of slot s: pool block (b * 7 + 6 - s), so neighbours differ.
                *kv.table_mut(s) = (0..per).map(|b| (b * 7 + 6 - s) as u32).collect();
            }
        };
        let (mut batch, mut alone) = (
            KvSlab::new(2, kvh, hd, 7, 7 * per),
            KvSlab::new(2, kvh, hd, 7, 7 * per),
        );
        tables(&mut batch);
        tables(&mut alone);
        batch.write_rows(1, &rows, &k, &v);
        for (i, r) in rows.iter().enumerate() {
            let at = i * width..(i + 1) * width;
            alone.write(1, r.slot, r.pos, &k[at.clone()], &v[at]);
        }
        for layer in 0..2 {
            assert_eq!(&batch.keys[layer][..], &alone.keys[layer][..]);
            assert_eq!(&batch.values[layer][..], &alone.values[layer][..]);
        }
        // Row 8 (slot 4, position 16), head 1, dimension 3.
        let want = (8 * width + hd + 3) as f32;
        assert_eq!(at(&batch, 1, 4, 1, 16, 3), (want, -want - 1.0));
        assert_eq!(at(&batch, 0, 4, 1, 16, 3), (0.0, 0.0));
    }

    #[test]
    fn copy_block_copies_every_layer_and_head_of_one_block() {
        let mut kv = KvSlab::new(2, 2, 4, 2, 4);
        *kv.table_mut(0) = vec![1, 2];
        *kv.table_mut(1) = vec![3];
        let row = |x: f32| vec![x; 8];
        for layer in 0..2 {
            for pos in 0..32 {
                let x = pos as f32 + 1.0;
                kv.write(layer, 0, pos, &row(x), &row(-x));
            }
        }
        kv.copy_block(2, 3);
        for layer in 0..2 {
            for h in 0..2 {
                for pos in 0..16 {
                    let x = (pos + 17) as f32;
                    assert_eq!(at(&kv, layer, 1, h, pos, 3), (x, -x));
                }
            }
        }
        assert_eq!(kv.block_stride(), 16 * 4);
    }

    #[test]
    fn a_contiguous_pool_gives_each_slot_its_own_blocks_in_order() {
        let kv = KvSlab::contiguous(1, 1, 8, 3, 40);
        assert_eq!(kv.blocks, 9);
        assert_eq!(kv.table(2), &[6, 7, 8]);
    }

    #[test]
    fn prefetching_any_row_or_window_reads_only_its_own_table() {
        // Rows past their table's end, windows longer or shorter than the context, and a
        // slot with no blocks: no panic, nothing written.
        let mut kv = KvSlab::new(2, 2, 8, 2, 4);
        kv.tables[0] = vec![3, 1];
        let copy = |kv: &KvSlab| -> Vec<Vec<f16>> {
            kv.keys
                .iter()
                .chain(&kv.values)
                .map(|z| z.to_vec())
                .collect()
        };
        let before = copy(&kv);
        for (slot, pos) in [(0, 0), (0, 31), (0, 500), (1, 0), (1, 70)] {
            for window in [None, Some(1), Some(16), Some(10_000)] {
                let row = TokenRow {
                    token: 0,
                    slot,
                    pos,
                };
                kv.prefetch(1, &[row, row], window);
            }
        }
        assert_eq!(copy(&kv), before);
    }
}
