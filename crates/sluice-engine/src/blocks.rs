//! The KV pool's bookkeeping: which blocks are free, how many tables hold each block, and
//! the prefix cache, a tree of full blocks keyed by their tokens (docs/ARCHITECTURE.md,
//! "The KV pool"). Pure: no keys or values here, only block numbers.
//!
//! A full block is identified by its parent's node (the block before it in its sequence;
//! 0 for the first) and its 16 tokens: exactly a radix tree with 16-token edges, SGLang's
//! RadixAttention over vLLM's block granularity. Node numbers are never reused, so a key
//! naming an evicted parent can never match a new block by accident, and lookups compare
//! tokens, not hashes: two different prefixes can never share a block.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use sluice_kernels::KEY_BLOCK;

/// A full block's identity: its parent's node and its tokens.
type Key = (u64, [u32; KEY_BLOCK]);

/// Blocks, their holders, and the prefix cache.
#[derive(Debug)]
pub(crate) struct BlockPool {
    /// Tables holding each block.
    refs: Vec<u32>,
    /// Free blocks that hold nothing cached, lowest first (the touched part of the pool
    /// stays small).
    free: BTreeSet<u32>,
    /// A cached block's key, and its node (what its children name as parent).
    cached: Vec<Option<(Key, u64)>>,
    /// The prefix cache: key -> block.
    index: HashMap<Key, u32>,
    /// Cached blocks no table holds, in eviction order: least recently used first, and
    /// on a tie the deepest (a sequence's last blocks go before its first).
    idle: BTreeSet<(u64, Reverse<u32>, u32)>,
    /// A block's place in `idle`: (last use, depth).
    stamp: Vec<(u64, u32)>,
    next_node: u64,
    /// Cached blocks evicted so far.
    pub evictions: u64,
}

impl BlockPool {
    /// A pool of `n` free blocks.
    pub fn new(n: usize) -> Self {
        Self {
            refs: vec![0; n],
            free: (0..n as u32).collect(),
            cached: vec![None; n],
            index: HashMap::new(),
            idle: BTreeSet::new(),
            stamp: vec![(0, 0); n],
            next_node: 1,
            evictions: 0,
        }
    }

    /// Blocks in the pool.
    pub fn total(&self) -> usize {
        self.refs.len()
    }

    /// Blocks that an allocation may take: free ones and cached ones no table holds.
    pub fn available(&self) -> usize {
        self.free.len() + self.idle.len()
    }

    /// Blocks some table holds.
    pub fn used(&self) -> usize {
        self.total() - self.available()
    }

    /// Blocks in the prefix cache (held or not).
    pub fn cached(&self) -> usize {
        self.index.len()
    }

    /// Tables holding `b`.
    pub fn refs(&self, b: u32) -> u32 {
        self.refs[b as usize]
    }

    /// Whether `b` is in the prefix cache.
    pub fn is_cached(&self, b: u32) -> bool {
        self.cached[b as usize].is_some()
    }

    /// Takes a block for a new holder: a free one, else the least recently used idle
    /// cached one (evicted from the cache). `None`: every block is held.
    pub fn allocate(&mut self) -> Option<u32> {
        let b = match self.free.pop_first() {
            Some(b) => b,
            None => {
                let (_, _, b) = self.idle.pop_first()?;
                self.uncache(b);
                self.evictions += 1;
                b
            }
        };
        self.refs[b as usize] = 1;
        Some(b)
    }

    /// One more table holds `b`.
    pub fn retain(&mut self, b: u32) {
        let i = b as usize;
        if self.refs[i] == 0 {
            let (t, d) = self.stamp[i];
            let was_idle = self.idle.remove(&(t, Reverse(d), b));
            assert!(
                was_idle,
                "retaining block {b}, which is neither held nor cached"
            );
        }
        self.refs[i] += 1;
    }

    /// One table fewer holds `b` (at time `now`; `depth`: its index in that table). A
    /// block nobody holds stays in the cache, idle, if it is cached, else it is free.
    pub fn release(&mut self, b: u32, now: u64, depth: usize) {
        let i = b as usize;
        assert!(
            self.refs[i] > 0,
            "releasing block {b}, which no table holds"
        );
        self.refs[i] -= 1;
        if self.refs[i] > 0 {
            return;
        }
        if self.cached[i].is_some() {
            self.stamp[i] = (now, depth as u32);
            self.idle.insert((now, Reverse(depth as u32), b));
        } else {
            self.free.insert(b);
        }
    }

    /// The cached blocks that hold `tokens` from the start, whole blocks only, at most
    /// `most` of them. Touches nothing: the caller retains those it takes.
    pub fn lookup(&self, tokens: &[u32], most: usize) -> Vec<u32> {
        let mut parent = 0;
        let mut out = Vec::new();
        for chunk in tokens.chunks_exact(KEY_BLOCK).take(most) {
            let key = (parent, chunk.try_into().expect("a whole block"));
            let Some(&b) = self.index.get(&key) else {
                break;
            };
            parent = self.cached[b as usize]
                .expect("indexed blocks are cached")
                .1;
            out.push(b);
        }
        out
    }

    /// Adds held block `b`, which holds `tokens` after `parent` (the block before it in
    /// its table, `None` for the first), to the cache. Nothing happens when the parent is
    /// not cached (the chain is broken), when `b` already is, or when another block
    /// already holds this prefix (the first stays; `b` remains private).
    pub fn publish(&mut self, b: u32, parent: Option<u32>, tokens: &[u32]) {
        assert!(
            self.refs[b as usize] > 0,
            "publishing block {b}, which no table holds"
        );
        let parent = match parent {
            None => 0,
            Some(p) => match self.cached[p as usize] {
                Some((_, node)) => node,
                None => return,
            },
        };
        if self.cached[b as usize].is_some() {
            return;
        }
        let key = (parent, tokens.try_into().expect("a whole block"));
        if self.index.contains_key(&key) {
            return;
        }
        self.index.insert(key, b);
        self.cached[b as usize] = Some((key, self.next_node));
        self.next_node += 1;
    }

    /// Removes held block `b` from the cache (its holder is about to write into it).
    pub fn unpublish(&mut self, b: u32) {
        assert!(
            self.refs[b as usize] > 0,
            "unpublishing block {b}, which no table holds"
        );
        self.uncache(b);
    }

    fn uncache(&mut self, b: u32) {
        if let Some((key, _)) = self.cached[b as usize].take() {
            self.index.remove(&key);
        }
    }

    /// Empties the cache (new weights): idle blocks become free, held ones private.
    pub fn clear(&mut self) {
        for (_, _, b) in std::mem::take(&mut self.idle) {
            self.free.insert(b);
        }
        self.index.clear();
        self.cached.fill(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(first: u32, blocks: usize) -> Vec<u32> {
        (first..first + (blocks * KEY_BLOCK) as u32).collect()
    }

    /// Allocates and publishes one block per 16 tokens, as a sequence computing them would.
    fn fill(pool: &mut BlockPool, t: &[u32]) -> Vec<u32> {
        let mut table: Vec<u32> = Vec::new();
        for chunk in t.chunks_exact(KEY_BLOCK) {
            let b = pool.allocate().unwrap();
            pool.publish(b, table.last().copied(), chunk);
            table.push(b);
        }
        table
    }

    fn release_all(pool: &mut BlockPool, table: &[u32], now: u64) {
        for (d, &b) in table.iter().enumerate() {
            pool.release(b, now, d);
        }
    }

    #[test]
    fn blocks_are_taken_lowest_first_and_counted() {
        let mut pool = BlockPool::new(4);
        assert_eq!((pool.allocate(), pool.allocate()), (Some(0), Some(1)));
        assert_eq!((pool.used(), pool.available()), (2, 2));
        pool.release(0, 1, 0);
        assert_eq!(pool.allocate(), Some(0));
        pool.retain(0);
        pool.release(0, 1, 0);
        assert_eq!(pool.refs(0), 1);
        assert_eq!(
            (pool.allocate(), pool.allocate(), pool.allocate()),
            (Some(2), Some(3), None)
        );
    }

    #[test]
    fn a_published_prefix_is_found_by_its_tokens_only_from_the_start() {
        let mut pool = BlockPool::new(8);
        let t = tokens(100, 3);
        let table = fill(&mut pool, &t);
        assert_eq!(pool.lookup(&t, 8), table);
        assert_eq!(pool.lookup(&t, 2), table[..2]);
        // A prompt diverging inside block 1 gets block 0 only; the same tokens at another
        // place in a sequence are another key.
        let mut other = t.clone();
        other[20] = 7;
        assert_eq!(pool.lookup(&other, 8), table[..1]);
        assert!(pool.lookup(&t[16..], 8).is_empty());
        // A partial block is never found.
        assert_eq!(pool.lookup(&t[..47], 8), table[..2]);
    }

    #[test]
    fn idle_cached_blocks_are_evicted_least_recently_used_and_deepest_first() {
        let mut pool = BlockPool::new(6);
        let (a, b) = (tokens(0, 3), tokens(1000, 3));
        let ta = fill(&mut pool, &a);
        let tb = fill(&mut pool, &b);
        release_all(&mut pool, &tb, 1);
        release_all(&mut pool, &ta, 2);
        assert_eq!((pool.used(), pool.available(), pool.cached()), (0, 6, 6));
        // b was released first: its blocks go first, its last block before its first.
        assert_eq!(pool.allocate(), Some(tb[2]));
        assert_eq!(pool.allocate(), Some(tb[1]));
        assert_eq!(pool.evictions, 2);
        assert_eq!(pool.lookup(&b, 8), tb[..1]);
        // A hit makes a block held again: it cannot be evicted while held.
        pool.retain(ta[0]);
        let taken: Vec<u32> = std::iter::from_fn(|| pool.allocate()).collect();
        assert_eq!(taken, vec![tb[0], ta[2], ta[1]]);
        assert_eq!(pool.lookup(&a, 8), ta[..1]);
    }

    #[test]
    fn a_child_of_an_evicted_parent_is_never_found_under_a_new_parent() {
        let mut pool = BlockPool::new(2);
        let a = tokens(0, 2);
        let ta = fill(&mut pool, &a);
        // Parent idle first (older), child still held.
        pool.release(ta[0], 1, 0);
        let b = pool.allocate().unwrap();
        assert_eq!(b, ta[0]);
        // The same first-block tokens published again under a new node.
        pool.publish(b, None, &a[..16]);
        assert_eq!(pool.lookup(&a, 8), vec![b]);
    }

    #[test]
    fn the_first_block_to_publish_a_prefix_keeps_it() {
        let mut pool = BlockPool::new(4);
        let t = tokens(5, 1);
        let first = fill(&mut pool, &t);
        let second = fill(&mut pool, &t);
        assert_eq!(pool.lookup(&t, 1), first);
        assert!(!pool.is_cached(second[0]));
        release_all(&mut pool, &second, 3);
        assert_eq!(pool.available(), 3);
    }

    #[test]
    fn clearing_frees_idle_blocks_and_forgets_every_prefix() {
        let mut pool = BlockPool::new(4);
        let t = tokens(0, 2);
        let table = fill(&mut pool, &t);
        pool.release(table[1], 1, 1);
        pool.clear();
        assert!(pool.lookup(&t, 8).is_empty());
        assert_eq!((pool.used(), pool.cached()), (1, 0));
        pool.release(table[0], 2, 0);
        assert_eq!(pool.available(), 4);
    }

    #[test]
    fn an_unpublished_block_is_freed_not_cached() {
        let mut pool = BlockPool::new(2);
        let t = tokens(0, 1);
        let table = fill(&mut pool, &t);
        pool.unpublish(table[0]);
        assert!(pool.lookup(&t, 1).is_empty());
        pool.release(table[0], 1, 0);
        assert_eq!((pool.available(), pool.cached()), (2, 0));
    }
}
