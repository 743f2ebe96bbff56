//! Where a forward pass's time goes: a clock the model runs around each stage of a layer
//! ([`stage`]), and `threads::for_each` around each region it shares out with the helper
//! threads, so that a bench can split a decode token into its matmuls and the serial work
//! between them (`benches/forward.rs`, `SLUICE_BENCH_STAGES=1`).
//!
//! Off unless turned on ([`set_on`]): then a stage costs one relaxed load and nothing is
//! recorded. On, each stage takes two clock reads and a lock, tens of nanoseconds against
//! stages of one to tens of microseconds.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);

/// Time and count per stage name, in order of first use.
static TABLE: Mutex<Vec<(&'static str, Duration, u64)>> = Mutex::new(Vec::new());

/// The name under which `threads::for_each` records the regions it shares out.
pub const REGIONS: &str = "(parallel regions, inside the stages above)";

/// Turns the clock on or off; results never depend on it.
pub fn set_on(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Whether the clock is on.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Runs `f`, adding its time to stage `name` when the clock is on.
#[inline]
pub fn stage<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    if !on() {
        return f();
    }
    let start = Instant::now();
    let r = f();
    record(name, start.elapsed());
    r
}

/// Adds `took` to stage `name`.
pub fn record(name: &'static str, took: Duration) {
    let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    match table.iter_mut().find(|(n, ..)| *n == name) {
        Some((_, t, c)) => {
            *t += took;
            *c += 1;
        }
        None => table.push((name, took, 1)),
    }
}

/// The stages recorded since the last call (time and count each), and a fresh start.
pub fn take() -> Vec<(&'static str, Duration, u64)> {
    std::mem::take(&mut *TABLE.lock().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_recorded_only_while_on() {
        // Other tests' parallel regions may be recorded while the clock is on: only this
        // test's own stage names are looked at.
        let mine = |t: Vec<(&'static str, Duration, u64)>| -> Vec<_> {
            t.into_iter()
                .filter(|(n, ..)| ["off", "a", "b", "c"].contains(n))
                .collect()
        };
        take();
        assert_eq!(stage("off", || 7), 7);
        assert!(mine(take()).is_empty());
        set_on(true);
        for _ in 0..3 {
            stage("a", || std::thread::sleep(Duration::from_millis(1)));
        }
        stage("b", || ());
        set_on(false);
        stage("c", || ());
        let t = mine(take());
        let names: Vec<_> = t.iter().map(|(n, _, c)| (*n, *c)).collect();
        assert_eq!(names, [("a", 3), ("b", 1)]);
        assert!(t[0].1 >= Duration::from_millis(3));
        assert!(mine(take()).is_empty());
    }
}
