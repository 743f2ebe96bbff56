//! Turns at the compute threads. Every engine in the process (a server of several
//! models runs one per loaded model) takes a turn for each step: the matrix kernels
//! already use every core, so two engines stepping at once would only fight over them
//! (docs/ARCHITECTURE.md, "Several models"). Turns are served first come, first served,
//! so two busy engines alternate step by step and neither starves.

use std::sync::{Condvar, Mutex, MutexGuard};

/// Tickets handed out and the ticket being served.
struct Queue {
    next: u64,
    serving: u64,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    next: 0,
    serving: 0,
});
static CALLED: Condvar = Condvar::new();

fn queue() -> MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A turn at the compute threads; the next waiter's turn starts when it drops.
pub(crate) struct Turn(());

/// Waits for a turn (at once when no other engine holds or waits for one).
pub(crate) fn take() -> Turn {
    let mut q = queue();
    let ticket = q.next;
    q.next += 1;
    while q.serving != ticket {
        q = CALLED.wait(q).unwrap_or_else(|p| p.into_inner());
    }
    Turn(())
}

impl Drop for Turn {
    fn drop(&mut self) {
        queue().serving += 1;
        CALLED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};

    use super::take;

    /// Two threads taking turns never hold one at the same time.
    #[test]
    fn one_turn_at_a_time() {
        let inside = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (inside, start) = (inside.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for _ in 0..2000 {
                        let _turn = take();
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                        std::hint::spin_loop();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
