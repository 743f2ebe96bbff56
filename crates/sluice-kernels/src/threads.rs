//! The compute threads of a forward pass: [`for_each`] runs `n` tasks on the calling
//! thread and on a fixed set of helper threads that spin between parallel regions.
//!
//! Why not rayon here: a decode step of one sequence is about 120 parallel regions (four
//! matmuls per layer and the head), each only tens of microseconds long. Rayon's job
//! injection and sleep/wake cost 3–8 µs per region when its threads are awake and 25–50 µs
//! once they have gone to sleep. Here the helpers spin on one atomic word, so a region
//! starts within a cache-line transfer, and they only go to sleep after
//! [`SPIN`] without work (between requests), so an idle server burns no CPU.
//!
//! Protocol. One atomic word, `state`, holds the current job's epoch and task count; one
//! more word per thread, each on its own cache line, holds that thread's share of the
//! tasks: the epoch and the range `lo..hi` still unclaimed. The caller writes the job's
//! closure pointer and every share (thread `t` gets the `t`-th contiguous slice of the
//! tasks), then publishes the new epoch. A thread claims from the front of its own share
//! (a compare-and-swap on a line no other thread touches until then, so it costs no
//! transfer between cores), and once that is empty steals one task at a time from the
//! back of another's. A claim's compare-and-swap names the exact (epoch, lo, hi) it read,
//! so a claim of a task always belongs to the job it read, whose caller is still waiting
//! (it returns only once `done` counts every task), which keeps the closure alive for
//! the claimed task. A helper that arrives late sees a different epoch, or empty shares,
//! and claims nothing.
//!
//! Why shares rather than one shared counter: on a VM whose two vCPUs sit on two physical
//! cores, a cache line takes about 160 ns to cross (`benches/kernels.rs`,
//! `SLUICE_BENCH_ONLY=threads`), and a shared counter crossed on nearly every claim. And a
//! thread that works through one contiguous slice of a matrix streams it front to back,
//! its prefetches running ahead into its next task, where interleaved claims made every
//! task a cold start. The threads still finish together: the one done first takes the
//! other's last tasks.
//!
//! Results never depend on which thread runs a task: each task writes its own outputs.

use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a helper spins without work before it sleeps.
const SPIN: Duration = Duration::from_millis(2);

/// Bits of `state` for the task index and the task count; the epoch takes the rest.
const BITS: u32 = 20;
const MASK: u64 = (1 << BITS) - 1;
const EPOCHS: u64 = (1 << (64 - 2 * BITS)) - 1;

type Task<'a> = &'a (dyn Fn(usize) + Sync);

struct Pool {
    /// epoch << 2·BITS | count << BITS.
    state: Line<AtomicU64>,
    /// Per thread (the caller is 0): epoch << 2·BITS | lo << BITS | hi, its share's
    /// unclaimed tasks `lo..hi`.
    shares: Box<[Line<AtomicU64>]>,
    /// Points at the current job's `Task` on the caller's stack.
    task: AtomicPtr<()>,
    /// Tasks of the current job finished by helpers (each adds its count once it finds
    /// no task left).
    done: Line<AtomicUsize>,
    /// A helper's task panicked; the caller re-raises it.
    panicked: Mutex<Option<Box<dyn Any + Send>>>,
    failed: AtomicBool,
    /// Helpers asleep or about to be.
    sleepers: AtomicUsize,
    helpers: OnceLock<Vec<Thread>>,
    /// One job at a time: a second caller runs its tasks itself.
    busy: Mutex<()>,
}

/// A value alone on its cache line (two lines: the adjacent-line prefetcher pairs them).
#[repr(align(128))]
#[derive(Default)]
struct Line<T>(T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

thread_local! {
    /// Set on helper threads, and on a caller during its job: a nested `for_each` runs
    /// its tasks serially on the thread that asked.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<&'static Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            state: Line(AtomicU64::new(0)),
            shares: (0..threads()).map(|_| Line::default()).collect(),
            task: AtomicPtr::new(std::ptr::null_mut()),
            done: Line(AtomicUsize::new(0)),
            panicked: Mutex::new(None),
            failed: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            helpers: OnceLock::new(),
            busy: Mutex::new(()),
        }));
        let helpers = (1..threads())
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("sluice-compute-{i}"))
                    .spawn(move || helper(pool, i))
                    .expect("the compute threads start (a failure here is fatal at start-up)")
                    .thread()
                    .clone()
            })
            .collect();
        let _ = pool.helpers.set(helpers);
        pool
    })
}

/// The number of compute threads, the caller included: `RAYON_NUM_THREADS` if set (the
/// same variable sets the other parallel work), else one per CPU.
pub fn threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("RAYON_NUM_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// Runs `f(0) .. f(n - 1)`, in parallel over the compute threads, and returns when all
/// are done. A panic in a task is re-raised here once every task has finished.
pub fn for_each(n: usize, f: impl Fn(usize) + Sync) {
    if n <= 1 || threads() == 1 || INSIDE.get() {
        return (0..n).for_each(f);
    }
    assert!(n as u64 <= MASK, "at most 2^20 tasks per job");
    let pool = pool();
    let Ok(_one) = pool.busy.try_lock() else {
        return (0..n).for_each(f);
    };
    let clock = crate::stages::on().then(Instant::now);
    INSIDE.set(true);
    let task: Task = &f;
    pool.task
        .store(&task as *const Task as *mut (), Ordering::Relaxed);
    pool.done.store(0, Ordering::Relaxed);
    let epoch = ((pool.state.load(Ordering::Relaxed) >> (2 * BITS)) + 1) & EPOCHS;
    let t = pool.shares.len();
    for (k, share) in pool.shares.iter().enumerate() {
        let (lo, hi) = ((k * n / t) as u64, ((k + 1) * n / t) as u64);
        share.store(epoch << (2 * BITS) | lo << BITS | hi, Ordering::Relaxed);
    }
    pool.state
        .store(epoch << (2 * BITS) | (n as u64) << BITS, Ordering::SeqCst);
    if pool.sleepers.load(Ordering::SeqCst) > 0 {
        pool.helpers
            .get()
            .into_iter()
            .flatten()
            .for_each(Thread::unpark);
    }
    let mut mine = 0;
    let mut raised = None;
    while let Some(i) = claim(pool, epoch, 0) {
        mine += 1;
        if raised.is_none()
            && let Err(e) = catch_unwind(AssertUnwindSafe(|| f(i)))
        {
            raised = Some(e);
        }
    }
    // A helper may still be inside a task it claimed: wait for it (yielding, in case it
    // was preempted and needs this CPU).
    let mut spins = 0u32;
    while pool.done.load(Ordering::Acquire) + mine < n {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    INSIDE.set(false);
    if let Some(start) = clock {
        crate::stages::record(crate::stages::REGIONS, start.elapsed());
    }
    if let Some(e) = raised {
        resume_unwind(e);
    }
    if pool.failed.swap(false, Ordering::Relaxed) {
        let e = pool
            .panicked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        resume_unwind(e.unwrap_or_else(|| Box::new("a compute task panicked")));
    }
}

/// `f(0) .. f(n - 1)` computed as [`for_each`] does, collected in order.
pub fn map<T: Send + Sync>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let out: Vec<OnceLock<T>> = (0..n).map(|_| OnceLock::new()).collect();
    for_each(n, |i| {
        let _ = out[i].set(f(i));
    });
    out.into_iter()
        .map(|v| v.into_inner().expect("every task ran"))
        .collect()
}

/// `f(i, chunk)` for each `size`-element chunk of `data` (the last may be shorter), as
/// [`for_each`] runs tasks.
pub fn for_each_chunk<T: Send>(data: &mut [T], size: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunks = Chunks::new(data, size);
    // SAFETY: task `i` is the only one that takes chunk `i`.
    for_each(chunks.count(), |i| f(i, unsafe { chunks.get(i) }));
}

/// `f(i, &mut items[i])` for every item, as [`for_each`] runs tasks: each task owns one
/// item. The safe way to hand parallel tasks disjoint pieces of memory: build a list of
/// them (e.g. `a.chunks_mut(n).zip(b.chunks_mut(m))`) and pass it here.
pub fn for_each_item<T: Send>(items: &mut [T], f: impl Fn(usize, &mut T) + Sync) {
    let cells = Chunks::new(items, 1);
    for_each(cells.count(), |i| {
        // SAFETY: `for_each` runs each index once, so item `i` has one taker.
        let item = unsafe { cells.get(i) };
        f(i, &mut item[0]);
    });
}

/// A mutable slice cut into `size`-element chunks that parallel tasks take by index.
pub(crate) struct Chunks<'a, T> {
    ptr: *mut T,
    len: usize,
    size: usize,
    _slice: PhantomData<&'a mut [T]>,
}

// SAFETY: a `Chunks` only hands out disjoint chunks of a slice it borrows mutably (see
// `get`), so sharing it across threads is sharing `&mut [T]` pieces: needs `T: Send`.
unsafe impl<T: Send> Send for Chunks<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Chunks<'_, T> {}

impl<'a, T> Chunks<'a, T> {
    pub fn new(data: &'a mut [T], size: usize) -> Self {
        assert!(size > 0, "chunks of at least one element");
        Self {
            ptr: data.as_mut_ptr(),
            len: data.len(),
            size,
            _slice: PhantomData,
        }
    }

    pub fn count(&self) -> usize {
        self.len.div_ceil(self.size)
    }

    /// Chunk `i` (empty past the end).
    ///
    /// # Safety
    /// No two live references to the same chunk: each index is taken by one task.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get(&self, i: usize) -> &'a mut [T] {
        let start = (i * self.size).min(self.len);
        let end = (start + self.size).min(self.len);
        // SAFETY: `start..end` lies inside the borrowed slice, and the caller guarantees
        // that no other reference to this range is live.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), end - start) }
    }
}

/// Claims a task of job `epoch` for thread `me`: the front of its own share, else the
/// back of another's, if any is left.
fn claim(pool: &Pool, epoch: u64, me: usize) -> Option<usize> {
    let t = pool.shares.len();
    (0..t).find_map(|k| take(&pool.shares[(me + k) % t], epoch, k == 0))
}

/// One task off the front (`own`) or the back of a share of job `epoch`.
fn take(share: &AtomicU64, epoch: u64, own: bool) -> Option<usize> {
    let mut s = share.load(Ordering::Acquire);
    loop {
        let (e, lo, hi) = (s >> (2 * BITS), (s >> BITS) & MASK, s & MASK);
        if e != epoch || lo >= hi {
            return None;
        }
        let (next, task) = if own {
            (s + (1 << BITS), lo)
        } else {
            (s - 1, hi - 1)
        };
        match share.compare_exchange_weak(s, next, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => return Some(task as usize),
            Err(now) => s = now,
        }
    }
}

fn helper(pool: &'static Pool, me: usize) -> ! {
    INSIDE.set(true);
    let mut seen = 0;
    let mut fetched = crate::ahead::latest();
    let threads = pool.shares.len();
    loop {
        let mut idle = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let e = pool.state.load(Ordering::Acquire) >> (2 * BITS);
            if e != seen {
                break e;
            }
            // The next region's share, fetched while waiting for it.
            let hint = crate::ahead::latest();
            if hint != fetched {
                fetched = hint;
                crate::ahead::fetch(me, threads, || {
                    pool.state.load(Ordering::Relaxed) >> (2 * BITS) == seen
                });
                continue;
            }
            std::hint::spin_loop();
            spins += 1;
            if spins.is_multiple_of(1024) && idle.elapsed() > SPIN {
                pool.sleepers.fetch_add(1, Ordering::SeqCst);
                if pool.state.load(Ordering::SeqCst) >> (2 * BITS) == seen {
                    std::thread::park();
                }
                pool.sleepers.fetch_sub(1, Ordering::SeqCst);
                idle = Instant::now();
            }
        };
        seen = epoch;
        let mut mine = 0;
        while let Some(i) = claim(pool, epoch, me) {
            // SAFETY: claiming task `i` of job `epoch` means that job's caller waits in
            // `for_each` until this task is counted in `done`, so the `Task` it points at
            // (on that caller's stack) is alive; the pointer was stored before the epoch
            // was published (release/acquire through `state`).
            let task: Task = unsafe { *(pool.task.load(Ordering::Relaxed) as *const Task) };
            if let Err(e) = catch_unwind(AssertUnwindSafe(|| task(i))) {
                *pool.panicked.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                pool.failed.store(true, Ordering::Relaxed);
            }
            mine += 1;
        }
        if mine > 0 {
            pool.done.fetch_add(mine, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_exactly_once() {
        for n in [0, 1, 2, 3, 7, 64, 1000] {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            for_each(n, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{n}");
        }
    }

    #[test]
    fn every_task_runs_exactly_once_when_shares_are_uneven() {
        // The first share's tasks are slow, so the other threads run out first and take
        // tasks off its back while its owner takes them off its front.
        let n = 64;
        let slow = n / threads();
        for _ in 0..20 {
            let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            for_each(n, |i| {
                if i < slow {
                    std::thread::sleep(Duration::from_micros(20));
                }
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn map_keeps_the_order_and_chunks_cover_the_slice() {
        assert_eq!(
            map(100, |i| i * i),
            (0..100).map(|i| i * i).collect::<Vec<_>>()
        );
        let mut v = vec![0usize; 1000];
        for_each_chunk(&mut v, 64, |c, chunk| {
            for (j, x) in chunk.iter_mut().enumerate() {
                *x = c * 64 + j;
            }
        });
        assert_eq!(v, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn nested_and_concurrent_jobs_complete() {
        let total = AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        for_each(8, |_| {
                            for_each(3, |_| {
                                total.fetch_add(1, Ordering::Relaxed);
                            })
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 200 * 8 * 3);
    }

    #[test]
    fn a_panicking_task_is_raised_on_the_caller_and_the_pool_keeps_working() {
        for _ in 0..20 {
            let r = catch_unwind(|| {
                for_each(16, |i| {
                    if i == 11 {
                        panic!("task 11");
                    }
                })
            });
            assert!(r.is_err());
        }
        let hits = AtomicU32::new(0);
        for_each(16, |_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 16);
    }

    #[test]
    fn helpers_that_went_to_sleep_are_woken() {
        let hits = AtomicU32::new(0);
        for_each(4, |_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        std::thread::sleep(SPIN * 3);
        for_each(4, |_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 8);
    }
}
