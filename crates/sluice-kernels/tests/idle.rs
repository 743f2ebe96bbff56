//! The compute threads spin between parallel regions, but an idle process must not burn
//! CPU: once a helper has had no work for its spin time it sleeps until the next job.
//! (Its own test binary, so that no other test gives the helpers work meanwhile.)

use std::time::Duration;

/// CPU time (user + system, in clock ticks) of this process's compute helper threads, and
/// how many there are.
fn helper_ticks() -> (u64, usize) {
    let (mut ticks, mut helpers) = (0, 0);
    let tasks = std::fs::read_dir("/proc/self/task").expect("Linux /proc");
    for dir in tasks.filter_map(|t| Some(t.ok()?.path())) {
        // A thread may end between the listing and the read: skip it.
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue;
        };
        if !comm.starts_with("sluice-compute") {
            continue;
        }
        // Fields after the command's closing parenthesis: state is field 3, utime 14,
        // stime 15.
        let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|v| v.parse().expect("a tick count"))
            .collect();
        ticks += f[0] + f[1];
        helpers += 1;
    }
    (ticks, helpers)
}

#[test]
fn idle_helpers_sleep_instead_of_spinning() {
    if sluice_kernels::threads::threads() < 2 {
        println!("skipped: one compute thread, so no helpers");
        return;
    }
    let sum = std::sync::atomic::AtomicUsize::new(0);
    sluice_kernels::threads::for_each(64, |i| {
        sum.fetch_add(i, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(sum.into_inner(), 64 * 63 / 2);
    // The helpers start with the first job but may not be running yet when the caller
    // has done all of its tasks itself: wait until each one has named itself.
    let want = sluice_kernels::threads::threads() - 1;
    let start = std::time::Instant::now();
    while helper_ticks().1 < want {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "helpers never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (before, _) = helper_ticks();
    // Well past the spin time; a helper that kept spinning would use about 100 ticks of
    // the 1 s (at the usual 100 ticks per second), a sleeping one none.
    std::thread::sleep(Duration::from_secs(1));
    let (after, _) = helper_ticks();
    assert!(
        after - before <= 10,
        "compute helpers used {} ticks of CPU in 1 s of idleness",
        after - before
    );
}
