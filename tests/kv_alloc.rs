//! The KV slab is allocated once: after start-up, serving 1,000 requests never makes an
//! allocation as large as one layer of the slab, and the slab's RSS stays flat
//! (docs/ARCHITECTURE.md, "The KV slab").

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice::engine::{EngineConfig, EngineHandle, Event, ValidRequest};

/// Counts allocations of at least `THRESHOLD` bytes.
struct Counting;

static THRESHOLD: AtomicUsize = AtomicUsize::new(usize::MAX);
static BIG: AtomicUsize = AtomicUsize::new(0);

fn note(size: usize) {
    if size >= THRESHOLD.load(Ordering::Relaxed) {
        BIG.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        // SAFETY: forwarded.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note(new);
        // SAFETY: forwarded.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn rss_kb() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_requests_allocate_no_kv() {
    let loaded = common::load();
    let c = loaded.model.shape().clone();
    let (model, tok) = (loaded.model, Arc::new(loaded.tokenizer));
    let (slots, context) = (4, 4096);
    let eng = EngineHandle::start(
        model,
        tok.clone(),
        EngineConfig {
            slots,
            context,
            max_queued: 2000,
            ..Default::default()
        },
    );
    let layer_bytes = slots * c.n_kv_heads * context * c.head_dim * 4;
    let prompt = tok.encode("The river runs").unwrap();
    let run = |n: usize| {
        let eng = eng.clone();
        let prompt = prompt.clone();
        async move {
            let streams: Vec<_> = (0..n)
                .map(|_| eng.submit(ValidRequest::greedy(prompt.clone(), 2)).unwrap())
                .collect();
            for mut rx in streams {
                while let Some(ev) = rx.recv().await {
                    if matches!(ev, Event::Done(_)) {
                        break;
                    }
                }
            }
        }
    };
    // The first request proves the engine (and its slab) is up.
    run(1).await;
    THRESHOLD.store(layer_bytes, Ordering::SeqCst);
    let rss_before = rss_kb();
    for _ in 0..10 {
        run(100).await;
    }
    let big = BIG.load(Ordering::SeqCst);
    THRESHOLD.store(usize::MAX, Ordering::SeqCst);
    assert_eq!(
        big, 0,
        "allocations of a KV layer's size ({layer_bytes} bytes) while serving"
    );
    let rss_after = rss_kb();
    assert!(
        rss_after < rss_before + 20 * 1024,
        "RSS grew from {rss_before} kB to {rss_after} kB"
    );
}
