//! Slot leases: a running sequence owns one block table of the KV pool through a lease,
//! and dropping the lease lets go of the table's blocks and frees the slot, so no exit
//! path can leak either (docs/ARCHITECTURE.md, "Slots").

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cache::KvCache;

/// The free slots of the slab. Lives on the engine thread only.
#[derive(Clone)]
pub struct SlotPool {
    free: Rc<RefCell<Vec<usize>>>,
    /// The KV cache whose tables the slots are.
    cache: Rc<RefCell<KvCache>>,
    total: usize,
    /// Slots leased now, readable from other threads.
    in_use: Arc<AtomicUsize>,
}

/// Exclusive use of one slot until dropped.
pub struct SlotLease {
    slot: usize,
    free: Rc<RefCell<Vec<usize>>>,
    cache: Rc<RefCell<KvCache>>,
    in_use: Arc<AtomicUsize>,
}

impl SlotPool {
    /// A pool of `n` slots, all free, for `cache`'s tables, counting leases in `in_use`.
    pub fn new(n: usize, cache: Rc<RefCell<KvCache>>, in_use: Arc<AtomicUsize>) -> Self {
        Self {
            free: Rc::new(RefCell::new((0..n).rev().collect())),
            cache,
            total: n,
            in_use,
        }
    }

    fn lease_of(&self, slot: usize) -> SlotLease {
        self.in_use.fetch_add(1, Ordering::SeqCst);
        SlotLease {
            slot,
            free: self.free.clone(),
            cache: self.cache.clone(),
            in_use: self.in_use.clone(),
        }
    }

    /// Takes a free slot (the lowest-numbered), if any.
    #[cfg(test)]
    pub fn lease(&self) -> Option<SlotLease> {
        let slot = self.free.borrow_mut().pop()?;
        Some(self.lease_of(slot))
    }

    /// Takes the free slot `slot`, if it is free.
    pub fn lease_slot(&self, slot: usize) -> Option<SlotLease> {
        let mut free = self.free.borrow_mut();
        let i = free.iter().position(|&s| s == slot)?;
        free.remove(i);
        drop(free);
        Some(self.lease_of(slot))
    }

    /// The free slots, lowest first.
    pub fn free_slots(&self) -> Vec<usize> {
        self.free.borrow().iter().rev().copied().collect()
    }

    /// Slots free now.
    pub fn available(&self) -> usize {
        self.free.borrow().len()
    }

    /// Slots in use now.
    pub fn used(&self) -> usize {
        self.total - self.available()
    }
}

impl SlotLease {
    /// The slab row this lease owns.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        self.cache.borrow_mut().free(self.slot);
        let mut free = self.free.borrow_mut();
        free.push(self.slot);
        // Lowest slot first keeps the touched part of the pool small.
        free.sort_unstable_by(|a, b| b.cmp(a));
        self.in_use.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> SlotPool {
        SlotPool::new(
            n,
            Rc::new(RefCell::new(KvCache::new(1, 1, 4, n, 4))),
            Arc::default(),
        )
    }

    #[test]
    fn dropping_a_lease_frees_its_slot_and_blocks() {
        let pool = pool(2);
        let a = pool.lease().unwrap();
        let b = pool.lease().unwrap();
        assert_eq!((a.slot(), b.slot()), (0, 1));
        pool.cache.borrow_mut().reserve(0, 0, 40).unwrap();
        assert_eq!(pool.cache.borrow().available(), 1);
        assert!(pool.lease().is_none());
        assert_eq!(pool.used(), 2);
        drop(a);
        assert_eq!(pool.available(), 1);
        assert_eq!(pool.cache.borrow().available(), 4);
        assert_eq!(pool.lease().unwrap().slot(), 0);
    }

    #[test]
    fn a_named_free_slot_can_be_leased_once() {
        let pool = pool(3);
        let b = pool.lease_slot(1).unwrap();
        assert!(pool.lease_slot(1).is_none());
        assert_eq!(pool.free_slots(), vec![0, 2]);
        drop(b);
        assert_eq!(pool.free_slots(), vec![0, 1, 2]);
    }
}
