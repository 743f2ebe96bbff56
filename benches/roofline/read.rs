//! The read side of the roofline: how fast the compute threads can stream memory.

use rayon::prelude::*;
use std::time::{Duration, Instant};

/// `len` words of ones, on huge pages where the system allows them, as sluice keeps its
/// weights (`sluice_kernels::Huge`): on 4 KB pages every 4 KB read is a TLB miss, and the
/// ceiling would be set too low.
pub fn ones(len: usize) -> sluice_kernels::Huge<u64> {
    let mut w = sluice_kernels::Huge::zeroed(len);
    w.fill(1);
    w
}

/// Best read bandwidth, bytes/s, of 10 passes over `buf` with the current rayon pool, each
/// pass read both plainly (the hardware prefetchers alone) and asking for every line 8 KB
/// ahead into L2, as the decode matmuls do (which is faster where the data comes from a
/// slow last-level cache): the faster of the two is the ceiling.
pub fn best_rate(buf: &[u64]) -> f64 {
    let mut best = 0f64;
    for _ in 0..10 {
        for ahead in [false, true] {
            let start = Instant::now();
            let sum: u64 = buf.par_chunks(1 << 17).map(|w| sum_words(w, ahead)).sum();
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(sum, buf.len() as u64, "every word read");
            best = best.max(std::mem::size_of_val(buf) as f64 / secs);
        }
    }
    best
}

/// Passes per way in [`window_rate`].
const WINDOW_PASSES: usize = 2;

/// The read rate, bytes/s, of a short window: [`WINDOW_PASSES`] passes over `buf` read
/// plainly and as many asking 8 KB ahead, on the compute threads decode itself runs on
/// (`sluice_kernels::threads`), each way's rate over all its passes (not its best pass);
/// the faster way is the window's rate. Set beside a decode run of about the same length
/// taken right after or before it, both see the machine in the same state.
pub fn window_rate(buf: &[u64]) -> f64 {
    // Contiguous tasks per thread: each thread streams one share front to back.
    let tasks = 16 * sluice_kernels::threads::threads();
    let size = buf.len().div_ceil(tasks).max(1);
    // Wake the helpers first (they sleep after a while without work): the timed passes
    // should not pay for it, as decode's steps, back to back, do not.
    sluice_kernels::threads::for_each(tasks, |_| {});
    let mut best = 0f64;
    for ahead in [false, true] {
        let start = Instant::now();
        for _ in 0..WINDOW_PASSES {
            let sums = sluice_kernels::threads::map(tasks, |i| {
                let lo = (i * size).min(buf.len());
                sum_words(&buf[lo..(lo + size).min(buf.len())], ahead)
            });
            assert_eq!(
                sums.iter().sum::<u64>(),
                buf.len() as u64,
                "every word read"
            );
        }
        let secs = start.elapsed().as_secs_f64();
        best = best.max((WINDOW_PASSES * std::mem::size_of_val(buf)) as f64 / secs);
    }
    best
}

/// One paired window: `decode()` (tokens/s, each token reading `bytes`) between two
/// [`window_rate`]s of `buf`, each after `settle` (time for the decoder to hand back the
/// compute threads), with the line crossing time ([`crossing_ns`]) before it: (decode
/// bytes/s, the mean of the two read rates, crossing ns).
pub fn window(
    buf: &[u64],
    bytes: f64,
    settle: Duration,
    decode: impl FnOnce() -> f64,
) -> (f64, f64, f64) {
    std::thread::sleep(settle);
    let crossing = crossing_ns();
    let before = window_rate(buf);
    let ts = decode();
    std::thread::sleep(settle);
    let after = window_rate(buf);
    (ts * bytes, (before + after) / 2.0, crossing)
}

/// The sum of `words`, with the widest vector loads the CPU has, prefetching `ahead`.
fn sum_words(words: &[u64], ahead: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { sum_words_avx2(words, ahead) };
    }
    sum_plain(words, false)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_words_avx2(words: &[u64], ahead: bool) -> u64 {
    sum_plain(words, ahead)
}

/// Eight independent sums (the compiler makes them vector lanes), so that the loop is
/// bound by loads, not by one chain of adds; one 64-byte line per step, with `ahead` the
/// line 8 KB further asked for into L2.
#[inline(always)]
fn sum_plain(words: &[u64], ahead: bool) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let rest: u64 = chunks.remainder().iter().sum();
    for c in chunks {
        #[cfg(target_arch = "x86_64")]
        if ahead {
            // SAFETY: SSE is part of x86_64; a prefetch never faults, whatever the address.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T1>(c.as_ptr().wrapping_add(1024) as *const i8);
            }
        }
        for (a, &w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(w);
        }
    }
    acc.iter().fold(rest, |s, &a| s.wrapping_add(a))
}

/// Round trips in [`crossing_ns`].
const CROSSINGS: u64 = 10_000;

/// The one-way time, ns, of a cache line passed back and forth between two threads the
/// OS places where it likes (on a 2-vCPU VM, one on each vCPU); `NaN` if the other thread
/// did not answer within a second. On a VM it tells where the host has put the vCPUs
/// right now: on one core's two hardware threads (30-36 ns on the AMD EPYC VM), which then
/// share that core's loads and prefetchers (a two-thread read of 30-34 GB/s), or on two
/// cores (150-200 ns there, and reads of 47-63 GB/s).
pub fn crossing_ns() -> f64 {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (flag, gave_up) = (AtomicU64::new(0), AtomicBool::new(false));
    let deadline = Instant::now() + Duration::from_secs(1);
    // Waits for `flag == want`; false once either side has given up.
    let wait = |want: u64| {
        while flag.load(Ordering::Acquire) != want {
            if gave_up.load(Ordering::Relaxed) || Instant::now() > deadline {
                gave_up.store(true, Ordering::Relaxed);
                return false;
            }
            std::hint::spin_loop();
        }
        true
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..CROSSINGS {
                if !wait(2 * i + 1) {
                    return;
                }
                flag.store(2 * i + 2, Ordering::Release);
            }
        });
        // The other thread up and spinning before the clock starts.
        flag.store(1, Ordering::Release);
        if !wait(2) {
            return f64::NAN;
        }
        let start = Instant::now();
        for i in 1..CROSSINGS {
            flag.store(2 * i + 1, Ordering::Release);
            if !wait(2 * i + 2) {
                return f64::NAN;
            }
        }
        start.elapsed().as_secs_f64() * 1e9 / (2 * (CROSSINGS - 1)) as f64
    })
}

/// Region `r` of `buf` cut into `regions` equal runs of words (the last one shorter).
fn region(buf: &[u64], regions: usize, r: usize) -> &[u64] {
    let per = buf.len().div_ceil(regions.max(1));
    &buf[(r * per).min(buf.len())..((r + 1) * per).min(buf.len())]
}

/// The read rate, bytes/s, of [`WINDOW_PASSES`] passes over `buf` cut into `regions`
/// parallel regions a pass, as a decode token's matmuls are (about four a layer), each of
/// 5 equal tasks a compute thread (decode's shrink: `tasks.rs`), so that each thread
/// streams its contiguous share of every region (`threads::for_each` gives thread `k` of
/// `t` tasks `k·n/t..(k+1)·n/t`); with `ahead` asking for each line 8 KB ahead as the
/// decode matmuls do, and with `next` each thread asking, as it starts its share of a
/// region, for the first 8 KB of its share of the next (at the first task of a share,
/// which its owner always runs: a thread done early takes the other's tasks from the
/// back). Against [`window_rate`] (one region a pass), it is what cutting the stream into a
/// token's regions costs, apart from the matmul kernels.
pub fn regions_rate(buf: &[u64], regions: usize, ahead: bool, next: bool) -> f64 {
    let threads = sluice_kernels::threads::threads();
    let tasks = 5 * threads;
    // The share that task `i` opens, if it is the first of one.
    let opens = |i: usize| (0..threads).find(|&k| k * tasks / threads == i);
    sluice_kernels::threads::for_each(tasks, |_| {});
    let start = Instant::now();
    let mut total = 0u64;
    for _ in 0..WINDOW_PASSES {
        for r in 0..regions {
            let words = region(buf, regions, r);
            let size = words.len().div_ceil(tasks).max(1);
            let part = |w: &[u64], i: usize| -> std::ops::Range<usize> {
                (i * size).min(w.len())..((i + 1) * size).min(w.len())
            };
            let sums = sluice_kernels::threads::map(tasks, |i| {
                if let Some(k) = opens(i).filter(|_| next && r + 1 < regions) {
                    let following = region(buf, regions, r + 1);
                    let first = part(following, k * tasks / threads);
                    let head = &following[first.start..first.end.min(first.start + 1024)];
                    sluice_kernels::prefetch(head);
                }
                sum_words(&words[part(words, i)], ahead)
            });
            total += sums.iter().sum::<u64>();
        }
    }
    assert_eq!(total, (WINDOW_PASSES * buf.len()) as u64, "every word read");
    (WINDOW_PASSES * std::mem::size_of_val(buf)) as f64 / start.elapsed().as_secs_f64()
}

/// The read rate, bytes/s, of [`WINDOW_PASSES`] passes over `buf` cut into `regions`
/// phases as [`regions_rate`] cuts it, but run by one thread per compute thread started
/// once, each reading its contiguous share of every phase and waiting for the others at a
/// spin barrier after each, reading plainly: what the cut costs when the hand-off is a
/// barrier instead of a parallel region.
pub fn barrier_rate(buf: &[u64], regions: usize) -> f64 {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    let t = sluice_kernels::threads::threads();
    let arrived = AtomicUsize::new(0);
    let total = AtomicU64::new(0);
    // The pool's helpers go to sleep after a while without work: let them, so that these
    // threads have the CPUs.
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    std::thread::scope(|s| {
        for k in 0..t {
            let (arrived, total) = (&arrived, &total);
            s.spawn(move || {
                let mut sum = 0u64;
                let mut phase = 0;
                for _ in 0..WINDOW_PASSES {
                    for r in 0..regions {
                        let words = region(buf, regions, r);
                        let share = words.len().div_ceil(t);
                        let a = (k * share).min(words.len());
                        sum = sum.wrapping_add(sum_words(
                            &words[a..(a + share).min(words.len())],
                            false,
                        ));
                        phase += 1;
                        arrived.fetch_add(1, Ordering::AcqRel);
                        let mut spins = 0u32;
                        while arrived.load(Ordering::Acquire) < t * phase {
                            // Yielding now and then, as `threads.rs` does, in case a
                            // thread was preempted and needs this CPU.
                            spins = spins.wrapping_add(1);
                            if spins.is_multiple_of(4096) {
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                    }
                }
                total.fetch_add(sum, Ordering::Relaxed);
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(
        total.into_inner(),
        (WINDOW_PASSES * buf.len()) as u64,
        "every word read"
    );
    (WINDOW_PASSES * std::mem::size_of_val(buf)) as f64 / secs
}
