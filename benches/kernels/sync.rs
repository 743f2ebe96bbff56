//! What it costs the compute threads to meet: `SLUICE_BENCH_ONLY=threads`.
//!
//! A decode step is about 120 parallel regions a token, each tens of microseconds long,
//! so the price of starting one, handing out its tasks and joining it matters. That price
//! is set by how far apart the threads run: on a VM the host may place the two vCPUs on
//! one physical core's two hardware threads (a cache line crosses in tens of
//! nanoseconds) or on two cores (hundreds), and may move them while the process runs.
//! Each round prints the cache-line round trip between two spinning threads (which of the
//! two placements this round ran on) and the microseconds per region of `for_each` with
//! 8 empty tasks and with 8 tasks of about 1 µs of arithmetic each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Nanoseconds for a cache line to go to another thread and back (median of 5 runs of
/// 20,000 exchanges).
pub fn round_trip_ns() -> f64 {
    #[repr(align(64))]
    struct Line(AtomicU64);
    const N: u64 = 20_000;
    // Past the helpers' spinning after the last region, so that the two threads here
    // have the two CPUs.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let flag = Line(AtomicU64::new(0));
            std::thread::scope(|s| {
                s.spawn(|| {
                    for i in 0..N {
                        while flag.0.load(Ordering::Acquire) != 2 * i + 1 {
                            std::hint::spin_loop();
                        }
                        flag.0.store(2 * i + 2, Ordering::Release);
                    }
                });
                let start = Instant::now();
                for i in 0..N {
                    flag.0.store(2 * i + 1, Ordering::Release);
                    while flag.0.load(Ordering::Acquire) != 2 * i + 2 {
                        std::hint::spin_loop();
                    }
                }
                start.elapsed().as_secs_f64() / N as f64 * 1e9
            })
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

/// Microseconds per `for_each(8, task)` region: the median of 21 runs of 2,000.
fn region_us(work: u32) -> f64 {
    let sink = AtomicU64::new(0);
    let task = |i: usize| {
        let mut v = i as u64;
        for _ in 0..work {
            v = std::hint::black_box(v.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        if v == 42 {
            sink.fetch_add(1, Ordering::Relaxed);
        }
    };
    let mut runs: Vec<f64> = (0..21)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..2_000 {
                sluice_kernels::threads::for_each(8, task);
            }
            start.elapsed().as_secs_f64() / 2_000.0 * 1e6
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[10]
}

pub fn table() {
    // About 1 µs of dependent multiplies (4 cycles each) at 3-4 GHz.
    const WORK: u32 = 1_000;
    let solo = {
        let start = Instant::now();
        for _ in 0..1_000 {
            for i in 0..8 {
                let mut v = i as u64;
                for _ in 0..WORK {
                    v = std::hint::black_box(v.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                std::hint::black_box(v);
            }
        }
        start.elapsed().as_secs_f64() / 1_000.0 * 1e6
    };
    println!(
        "compute threads: {}; 8 tasks of work take {solo:.2} µs on one thread",
        sluice_kernels::threads::threads()
    );
    println!(
        "| round | round trip ns | 8 empty tasks µs | 8 tasks of work µs | round trip ns after |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for round in 0..8 {
        let before = round_trip_ns();
        let empty = region_us(0);
        let busy = region_us(WORK);
        let after = round_trip_ns();
        println!("| {round} | {before:.0} | {empty:.2} | {busy:.2} | {after:.0} |");
    }
}
