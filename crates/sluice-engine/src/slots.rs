//! Slot leases: a running sequence owns one row of the KV slab through a lease, and
//! dropping the lease frees the slot, so no exit path can leak one (docs/ARCHITECTURE.md,
//! "Slots").

use std::cell::RefCell;
use std::rc::Rc;

/// The free slots of the slab. Lives on the engine thread only.
#[derive(Clone)]
pub struct SlotPool {
    free: Rc<RefCell<Vec<usize>>>,
    total: usize,
}

/// Exclusive use of one slot until dropped.
pub struct SlotLease {
    slot: usize,
    free: Rc<RefCell<Vec<usize>>>,
}

impl SlotPool {
    /// A pool of `n` slots, all free.
    pub fn new(n: usize) -> Self {
        Self {
            free: Rc::new(RefCell::new((0..n).rev().collect())),
            total: n,
        }
    }

    /// Takes a free slot (the lowest-numbered), if any.
    pub fn lease(&self) -> Option<SlotLease> {
        let slot = self.free.borrow_mut().pop()?;
        Some(SlotLease {
            slot,
            free: self.free.clone(),
        })
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_a_lease_frees_its_slot() {
        let pool = SlotPool::new(2);
        let a = pool.lease().unwrap();
        let b = pool.lease().unwrap();
        assert_eq!((a.slot(), b.slot()), (0, 1));
        assert!(pool.lease().is_none());
        assert_eq!(pool.used(), 2);
        drop(a);
        assert_eq!(pool.available(), 1);
        assert_eq!(pool.lease().unwrap().slot(), 0);
    }
}
