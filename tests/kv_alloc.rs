//! The KV slab is allocated once: after start-up, serving 1,000 requests never makes an
//! allocation as large as one layer of the slab, and the slab's RSS stays flat
//! (docs/ARCHITECTURE.md, "The KV slab").

mod common;

use std::sync::Arc;

use sluice::engine::{EngineConfig, EngineHandle, Event, ValidRequest};
use sluice_kernels::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

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
    GLOBAL.count_from(layer_bytes);
    let rss_before = rss_kb();
    for _ in 0..10 {
        run(100).await;
    }
    let big = GLOBAL.counted();
    GLOBAL.count_from(usize::MAX);
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
