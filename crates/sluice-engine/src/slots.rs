//! Slot leases: a running sequence owns one row of the KV slab through a lease, and
//! dropping the lease frees the slot, so no exit path can leak one (docs/ARCHITECTURE.md,
//! "Slots").

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The free slots of the slab. Lives on the engine thread only.
#[derive(Clone)]
pub struct SlotPool {
    free: Rc<RefCell<Vec<usize>>>,
    total: usize,
    /// Slots leased now, readable from other threads.
    in_use: Arc<AtomicUsize>,
}

/// Exclusive use of one slot until dropped.
pub struct SlotLease {
    slot: usize,
    free: Rc<RefCell<Vec<usize>>>,
    in_use: Arc<AtomicUsize>,
}

impl SlotPool {
    /// A pool of `n` slots, all free, counting leases in `in_use`.
    pub fn new(n: usize, in_use: Arc<AtomicUsize>) -> Self {
        Self {
            free: Rc::new(RefCell::new((0..n).rev().collect())),
            total: n,
            in_use,
        }
    }

    fn lease_of(&self, slot: usize) -> SlotLease {
        self.in_use.fetch_add(1, Ordering::SeqCst);
        SlotLease {
            slot,
            free: self.free.clone(),
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
        let mut free = self.free.borrow_mut();
        free.push(self.slot);
        // Lowest slot first keeps the touched part of the slab small.
        free.sort_unstable_by(|a, b| b.cmp(a));
        self.in_use.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_a_lease_frees_its_slot() {
        let pool = SlotPool::new(2, Arc::default());
        let a = pool.lease().unwrap();
        let b = pool.lease().unwrap();
        assert_eq!((a.slot(), b.slot()), (0, 1));
        assert!(pool.lease().is_none());
        assert_eq!(pool.used(), 2);
        drop(a);
        assert_eq!(pool.available(), 1);
        assert_eq!(pool.lease().unwrap().slot(), 0);
    }

    #[test]
    fn a_named_free_slot_can_be_leased_once() {
        let pool = SlotPool::new(3, Arc::default());
        let b = pool.lease_slot(1).unwrap();
        assert!(pool.lease_slot(1).is_none());
        assert_eq!(pool.free_slots(), vec![0, 2]);
        drop(b);
        assert_eq!(pool.free_slots(), vec![0, 1, 2]);
    }
}
