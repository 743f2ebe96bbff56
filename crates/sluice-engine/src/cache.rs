//! The KV cache's one owner: the pool's memory (`kv::KvSlab`), its bookkeeping
//! (`blocks::BlockPool`) and the slots' block tables, behind a small API the worker calls
//! (docs/ARCHITECTURE.md, "The KV pool"). Every change to a table goes through here, so a
//! block's count of holders always equals the tables that name it.

use sluice_kernels::KEY_BLOCK;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::blocks::BlockPool;
use crate::kv::KvSlab;

/// The pool ran out of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoRoom;

/// Blocks covering positions `0..n`.
pub(crate) fn blocks_for(n: usize) -> usize {
    n.div_ceil(KEY_BLOCK)
}

/// The pool, its tables and the prefix cache.
pub(crate) struct KvCache {
    /// The memory and the tables (the model reads and writes through it).
    pub slab: KvSlab,
    pool: BlockPool,
    /// Bumped when the weights change: cached keys and values of other weights are never
    /// used, and tables started before are never published.
    epoch: u64,
    /// Per slot: the epoch its table was started in, and how many of its leading blocks
    /// have been offered to the prefix cache.
    slot_epoch: Vec<u64>,
    published: Vec<usize>,
    /// The engine's clock (steps run), for least-recently-used eviction.
    pub now: u64,
    /// Blocks held, and the most held at once, published after every change for other
    /// threads to read.
    pub held_gauge: Arc<AtomicUsize>,
    pub peak_gauge: Arc<AtomicUsize>,
}

impl KvCache {
    /// A pool of `blocks` blocks for `slots` tables.
    pub fn new(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        slots: usize,
        blocks: usize,
    ) -> Self {
        Self {
            slab: KvSlab::new(layers, kv_heads, head_dim, slots, blocks),
            pool: BlockPool::new(blocks),
            epoch: 0,
            slot_epoch: vec![0; slots],
            published: vec![0; slots],
            now: 0,
            held_gauge: Arc::default(),
            peak_gauge: Arc::default(),
        }
    }

    /// Blocks in the pool.
    pub fn total(&self) -> usize {
        self.pool.total()
    }

    /// Blocks an allocation may take (free, or cached and idle).
    pub fn available(&self) -> usize {
        self.pool.available()
    }

    /// Blocks some table holds.
    pub fn used(&self) -> usize {
        self.pool.used()
    }

    /// Blocks in the prefix cache.
    pub fn cached(&self) -> usize {
        self.pool.cached()
    }

    /// Cached blocks evicted so far.
    pub fn evictions(&self) -> u64 {
        self.pool.evictions
    }

    /// Blocks of `slot`'s table.
    pub fn held(&self, slot: usize) -> usize {
        self.slab.table(slot).len()
    }

    /// Blocks that would become available if `slot` let go of its table (those no other
    /// table holds).
    pub fn freed_by(&self, slot: usize) -> usize {
        let t = self.slab.table(slot);
        t.iter().filter(|&&b| self.pool.refs(b) == 1).count()
    }

    /// Positions of `tokens` the prefix cache holds, whole blocks only, at most `most`.
    pub fn lookup(&self, tokens: &[u32], most: usize) -> usize {
        self.pool.lookup(tokens, most / KEY_BLOCK).len() * KEY_BLOCK
    }

    /// Starts `slot`'s table (empty) with the cached blocks holding `tokens` from the start,
    /// at most `most` positions (`use_cache` false: none). Returns the positions reused.
    pub fn start(&mut self, slot: usize, tokens: &[u32], most: usize, use_cache: bool) -> usize {
        assert!(
            self.slab.table(slot).is_empty(),
            "slot {slot} starts with blocks"
        );
        self.slot_epoch[slot] = self.epoch;
        let hits = if use_cache {
            self.pool.lookup(tokens, most / KEY_BLOCK)
        } else {
            Vec::new()
        };
        for &b in &hits {
            self.pool.retain(b);
        }
        self.published[slot] = hits.len();
        let n = hits.len() * KEY_BLOCK;
        *self.slab.table_mut(slot) = hits;
        self.sync();
        n
    }

    /// Makes `to` share `from`'s blocks for positions `0..len` (the choices of `n`, beams):
    /// `to`'s own blocks are let go first. Nothing is copied until one of them writes into
    /// a shared block (`reserve`). Returns false (and does nothing) when `from`'s table was
    /// started under other weights.
    pub fn fork(&mut self, from: usize, to: usize, len: usize) -> bool {
        if self.slot_epoch[from] != self.epoch {
            return false;
        }
        self.free(to);
        let shared = self.slab.table(from)[..blocks_for(len)].to_vec();
        for &b in &shared {
            self.pool.retain(b);
        }
        self.published[to] = self.published[from].min(len / KEY_BLOCK);
        self.slot_epoch[to] = self.epoch;
        *self.slab.table_mut(to) = shared;
        self.sync();
        true
    }

    /// Lets go of `slot`'s blocks: cached ones stay in the cache, idle.
    pub fn free(&mut self, slot: usize) {
        let now = self.now;
        let table = std::mem::take(self.slab.table_mut(slot));
        for (depth, &b) in table.iter().enumerate() {
            self.pool.release(b, now, depth);
        }
        self.published[slot] = 0;
        self.sync();
    }

    /// Blocks `reserve(slot, from, to)` would take: new blocks, and copies of shared ones.
    pub fn needed(&self, slot: usize, from: usize, to: usize) -> usize {
        let t = self.slab.table(slot);
        let new = blocks_for(to).saturating_sub(t.len());
        let shared = (from / KEY_BLOCK..blocks_for(to).min(t.len()))
            .filter(|&b| self.pool.refs(t[b]) > 1)
            .count();
        new + shared
    }

    /// Whether the first block `slot` writes next (at `from`) is shared, so writing
    /// costs a copy.
    pub fn shares_block_at(&self, slot: usize, from: usize) -> bool {
        let t = self.slab.table(slot);
        t.get(from / KEY_BLOCK)
            .is_some_and(|&b| self.pool.refs(b) > 1)
    }

    /// Makes positions `from..to` of `slot` writable: new blocks at the end of its table,
    /// and a private copy of every shared block among them (copy-on-write). A cached
    /// block only this table holds leaves the cache before it is written. On `NoRoom` the
    /// table is unchanged but for the blocks already made writable.
    pub fn reserve(&mut self, slot: usize, from: usize, to: usize) -> Result<(), NoRoom> {
        let done = self.make_writable(slot, from, to);
        self.sync();
        done
    }

    fn make_writable(&mut self, slot: usize, from: usize, to: usize) -> Result<(), NoRoom> {
        let now = self.now;
        for b in from / KEY_BLOCK..blocks_for(to) {
            let len = self.slab.table(slot).len();
            if b == len {
                let new = self.pool.allocate().ok_or(NoRoom)?;
                self.slab.table_mut(slot).push(new);
                continue;
            }
            let old = self.slab.table(slot)[b];
            if self.pool.refs(old) > 1 {
                let new = self.pool.allocate().ok_or(NoRoom)?;
                self.slab.copy_block(old, new);
                self.pool.release(old, now, b);
                self.slab.table_mut(slot)[b] = new;
                self.published[slot] = self.published[slot].min(b);
            } else if self.pool.is_cached(old) {
                self.pool.unpublish(old);
                self.published[slot] = self.published[slot].min(b);
            }
        }
        Ok(())
    }

    /// Offers `slot`'s full blocks among positions `0..computed` to the prefix cache
    /// (`token(p)`: the token at position `p`).
    pub fn publish(&mut self, slot: usize, token: impl Fn(usize) -> u32, computed: usize) {
        if self.slot_epoch[slot] != self.epoch {
            return;
        }
        let full = computed / KEY_BLOCK;
        for b in self.published[slot]..full {
            let table = self.slab.table(slot);
            let parent = b.checked_sub(1).map(|p| table[p]);
            let block = table[b];
            let tokens: [u32; KEY_BLOCK] = std::array::from_fn(|i| token(b * KEY_BLOCK + i));
            self.pool.publish(block, parent, &tokens);
        }
        self.published[slot] = self.published[slot].max(full);
    }

    fn sync(&self) {
        let used = self.pool.used();
        self.held_gauge.store(used, Ordering::SeqCst);
        self.peak_gauge.fetch_max(used, Ordering::SeqCst);
    }

    /// Forgets every cached prefix (new weights).
    pub fn invalidate(&mut self) {
        self.pool.clear();
        self.epoch += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(slots: usize, blocks: usize) -> KvCache {
        KvCache::new(1, 1, 4, slots, blocks)
    }

    /// Writes position `pos` of `slot` with `x` everywhere.
    fn put(c: &mut KvCache, slot: usize, pos: usize, x: f32) {
        c.slab.write(0, slot, pos, &[x; 4], &[x; 4]);
    }

    fn get(c: &KvCache, slot: usize, pos: usize) -> f32 {
        let v = c.slab.read(0, slot, 0, pos + 1);
        let at = v.table[pos / KEY_BLOCK] as usize * v.block_stride + (pos % KEY_BLOCK) * 4;
        v.values[at].to_f32()
    }

    #[test]
    fn a_fork_shares_blocks_until_a_write_copies_the_shared_one() {
        let mut c = cache(2, 8);
        c.reserve(0, 0, 20).unwrap();
        for p in 0..20 {
            put(&mut c, 0, p, p as f32);
        }
        assert!(c.fork(0, 1, 19));
        assert_eq!((c.used(), c.needed(1, 19, 20)), (2, 1));
        // Slot 1 writes position 19: block 1 is copied first; slot 0 keeps its value.
        c.reserve(1, 19, 20).unwrap();
        put(&mut c, 1, 19, -1.0);
        assert_eq!(
            (get(&c, 0, 19), get(&c, 1, 19), get(&c, 1, 18)),
            (19.0, -1.0, 18.0)
        );
        assert_eq!(c.slab.table(0)[0], c.slab.table(1)[0]);
        assert_ne!(c.slab.table(0)[1], c.slab.table(1)[1]);
        assert_eq!(c.used(), 3);
        // Now slot 0 holds its block 1 alone: writing there copies nothing.
        assert_eq!(c.needed(0, 20, 21), 0);
        c.free(0);
        c.free(1);
        assert_eq!(c.available(), 8);
    }

    #[test]
    fn published_blocks_are_reused_by_a_later_prompt_and_survive_their_writer() {
        let mut c = cache(2, 4);
        let tokens: Vec<u32> = (0..40).collect();
        c.start(0, &tokens, 39, true);
        c.reserve(0, 0, 40).unwrap();
        c.publish(0, |p| tokens[p], 40);
        assert_eq!(c.cached(), 2);
        c.free(0);
        assert_eq!((c.available(), c.cached()), (4, 2));
        // The same prompt: two blocks reused, at most `most` positions.
        assert_eq!(c.start(1, &tokens, 39, true), 32);
        assert_eq!(c.used(), 2);
        c.free(1);
        assert_eq!(c.start(1, &tokens, 31, true), 16);
        c.free(1);
        assert_eq!(c.start(1, &tokens, 39, false), 0);
        c.free(1);
        c.invalidate();
        assert_eq!((c.start(1, &tokens, 39, true), c.cached()), (0, 0));
        c.free(1);
        assert_eq!(c.available(), 4);
    }

    #[test]
    fn reserve_fails_cleanly_when_the_pool_is_full() {
        let mut c = cache(2, 2);
        c.reserve(0, 0, 20).unwrap();
        assert_eq!(c.reserve(1, 0, 1), Err(NoRoom));
        assert_eq!(c.held(1), 0);
        c.free(0);
        c.reserve(1, 0, 1).unwrap();
        assert_eq!(c.held(1), 1);
    }

    #[test]
    fn a_table_of_other_weights_is_neither_forked_nor_published() {
        let mut c = cache(2, 4);
        let tokens: Vec<u32> = (0..16).collect();
        c.reserve(0, 0, 16).unwrap();
        c.invalidate();
        assert!(!c.fork(0, 1, 16));
        c.publish(0, |p| tokens[p], 16);
        assert_eq!(c.cached(), 0);
    }

    #[test]
    fn writing_into_an_own_cached_block_takes_it_out_of_the_cache() {
        let mut c = cache(1, 2);
        let tokens: Vec<u32> = (0..16).collect();
        c.reserve(0, 0, 16).unwrap();
        c.publish(0, |p| tokens[p], 16);
        assert_eq!(c.cached(), 1);
        c.reserve(0, 15, 16).unwrap();
        assert_eq!(c.cached(), 0);
    }
}
