//! Memory the next parallel region will read, fetched into the helpers' caches while they
//! would otherwise wait.
//!
//! Between two matmuls of a decode step the engine thread works alone (attention, norms,
//! quantising the next input), and the helper threads spin: on a 2-vCPU machine a helper
//! waited about a quarter of each SmolLM2 decode token (`threads.rs`' helpers, measured
//! with timestamps around every region). The caller knows which matrices come next, so it
//! names them here ([`hint`]); a waiting helper then prefetches its own share of them into
//! its L2 cache (the share it will be given: the same contiguous fraction of the groups,
//! `threads.rs`), and stops as soon as the region starts. Prefetching never faults, so a
//! stale hint (weights since reloaded) costs a wasted fetch, never a crash; results never
//! depend on it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Arrays a hint can name (a matrix's quants and scale arrays, a few matrices).
const MOST: usize = 16;

/// Bytes a helper fetches for one hint at most: half of a 2 MB L2, so that its share of
/// the next matrix is not pushed out by itself.
const BUDGET: usize = 1 << 20;

/// Whether hints and [`prefetch`] act ([`set_fetch_ahead`]).
static ON: AtomicBool = AtomicBool::new(true);

/// Turns fetching ahead (hints to idle helpers, and [`prefetch`]) on or off: the knob
/// `benches/forward.rs` turns to compare decode with and without it in one process.
/// Results never depend on it.
pub fn set_fetch_ahead(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// One array of the next region: `len` bytes at `ptr`, laid out by the `groups` weight
/// groups that start at group `first` of the region (groups counted across its matrices,
/// in task order).
#[derive(Clone, Copy, Debug)]
pub struct Array {
    /// Start of the bytes.
    pub ptr: *const u8,
    /// Byte length.
    pub len: usize,
    /// The region's group at which this array's matrix starts.
    pub first: usize,
    /// Groups of this array's matrix.
    pub groups: usize,
}

struct Slot {
    ptr: AtomicUsize,
    len: AtomicUsize,
    first: AtomicUsize,
    groups: AtomicUsize,
}

static SLOTS: [Slot; MOST] = [const {
    Slot {
        ptr: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        first: AtomicUsize::new(0),
        groups: AtomicUsize::new(0),
    }
}; MOST];
/// Hints given so far (a helper fetches each once) << 8 | arrays in the latest.
static SEQ: AtomicU64 = AtomicU64::new(0);
/// Groups of the latest hint's region.
static TOTAL: AtomicUsize = AtomicUsize::new(0);

/// Names the arrays the next parallel region reads (at most `MOST`; the rest are left
/// out) over `total` groups. Called by the thread that will start the region.
pub fn hint(arrays: &[Array], total: usize) {
    let n = arrays.len().min(MOST);
    for (slot, a) in SLOTS.iter().zip(&arrays[..n]) {
        slot.ptr.store(a.ptr as usize, Ordering::Relaxed);
        slot.len.store(a.len, Ordering::Relaxed);
        slot.first.store(a.first, Ordering::Relaxed);
        slot.groups.store(a.groups, Ordering::Relaxed);
    }
    TOTAL.store(total, Ordering::Relaxed);
    let seq = (SEQ.load(Ordering::Relaxed) >> 8) + 1;
    SEQ.store(seq << 8 | n as u64, Ordering::Release);
}

/// The latest hint's number, for [`fetch`].
pub(crate) fn latest() -> u64 {
    SEQ.load(Ordering::Acquire) >> 8
}

/// Fetches into L2, while `waiting()` holds (checked every group), thread `me`'s share
/// (of `threads`) of the latest hint, then the back of the share it steals from first
/// when its own is done (`threads.rs`: the next thread's, from its end), up to `BUDGET`
/// bytes in all.
pub(crate) fn fetch(me: usize, threads: usize, waiting: impl Fn() -> bool) {
    let seq = SEQ.load(Ordering::Acquire);
    let n = (seq & 0xFF) as usize;
    let total = TOTAL.load(Ordering::Relaxed);
    let arrays: Vec<Array> = SLOTS[..n]
        .iter()
        .map(|slot| Array {
            ptr: slot.ptr.load(Ordering::Relaxed) as *const u8,
            len: slot.len.load(Ordering::Relaxed),
            first: slot.first.load(Ordering::Relaxed),
            groups: slot.groups.load(Ordering::Relaxed).max(1),
        })
        .collect();
    let mut budget = BUDGET;
    for g in order(me, threads, total) {
        if budget == 0 || !waiting() {
            return;
        }
        for a in &arrays {
            if g < a.first || g >= a.first + a.groups {
                continue;
            }
            // Group `g`'s bytes of the array.
            let at = |k: usize| (k - a.first) * a.len / a.groups;
            let (from, to) = (at(g), at(g + 1));
            for (k, line) in (from..to).step_by(64).enumerate() {
                // A check every 1 KB, so that the region waits little for this thread.
                if k % 16 == 15 && !waiting() {
                    return;
                }
                prefetch_l2(a.ptr.wrapping_add(line) as usize);
            }
            budget = budget.saturating_sub(to - from);
        }
    }
}

/// The groups (of `total`) thread `me` of `threads` fetches, in order: its own share, then
/// the next thread's from the back, the order in which it will claim them.
fn order(me: usize, threads: usize, total: usize) -> impl Iterator<Item = usize> {
    let share = |k: usize| k * total / threads..(k + 1) * total / threads;
    share(me).chain(share((me + 1) % threads).rev())
}

#[inline(always)]
fn prefetch_l2(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86_64; a prefetch never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T1>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Asks for `bytes` to be brought into this thread's L2 cache (a line at a time), for a
/// read soon after other work: e.g. a decode row's keys and values, fetched before the
/// matmul that precedes its attention.
pub fn prefetch<T>(data: &[T]) {
    if !on() {
        return;
    }
    let (ptr, len) = (data.as_ptr() as usize, std::mem::size_of_val(data));
    for line in (0..len).step_by(64) {
        prefetch_l2(ptr + line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_helper_fetches_its_share_then_the_back_of_the_next() {
        assert_eq!(
            order(1, 2, 10).collect::<Vec<_>>(),
            [5, 6, 7, 8, 9, 4, 3, 2, 1, 0]
        );
        assert_eq!(order(0, 2, 3).collect::<Vec<_>>(), [0, 2, 1]);
        assert_eq!(order(2, 3, 9).collect::<Vec<_>>(), [6, 7, 8, 2, 1, 0]);
        assert_eq!(order(0, 2, 0).count(), 0);
    }

    #[test]
    fn fetching_a_stale_hint_is_harmless() {
        // Memory freed since the hint, and addresses never mapped: a prefetch never faults.
        let freed = vec![0u8; 1 << 16];
        let stale = freed.as_ptr();
        drop(freed);
        let arrays = [
            Array {
                ptr: stale,
                len: 1 << 16,
                first: 0,
                groups: 4,
            },
            Array {
                ptr: std::ptr::null(),
                len: 1 << 16,
                first: 4,
                groups: 4,
            },
        ];
        hint(&arrays, 8);
        let calls = std::cell::Cell::new(0);
        fetch(1, 2, || {
            calls.set(calls.get() + 1);
            true
        });
        // Every group of its own share and of the next one's was visited: a check per
        // group and one per 1 KB of it (16 KB each).
        assert_eq!(calls.get(), 8 * (1 + 16));
        // And it stops as soon as the region starts.
        calls.set(0);
        fetch(1, 2, || {
            calls.set(calls.get() + 1);
            calls.get() < 3
        });
        assert_eq!(calls.get(), 3);
    }
}
