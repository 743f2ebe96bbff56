//! The KV slab is allocated once: after start-up, serving 1,000 requests never makes an
//! allocation as large as one layer of the slab, and the slab's RSS stays flat; and an
//! idle server's slab is not resident (docs/ARCHITECTURE.md, "The KV slab").

mod common;

use std::sync::Arc;

use sluice::engine::{EngineConfig, EngineHandle, Event, ValidRequest};
use sluice_kernels::CountingAlloc;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc::new();

fn rss_kb() -> u64 {
    common::proc_kb("self/status", "VmRSS").unwrap_or(0)
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
    // One layer's keys (or values): f16, 2 bytes a value.
    let layer_bytes = slots * c.n_kv_heads * context * c.head_dim * 2;
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
    // One request per slot: the engine is up, and every slot has been used once. (The
    // slab's pages are backed on first write; a slot's transposed keys, one row of
    // `context` positions per key dimension, become resident at its first token.)
    run(slots).await;
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

fn rss_kb_of(pid: u32) -> u64 {
    common::proc_kb(&format!("{pid}/status"), "VmRSS").unwrap_or(0)
}

/// `sluice serve` with the default 32 slots x 2048 positions reserves a 1.5 GB f16 slab
/// for the default model, and idles at the model plus a small constant: the slab's pages
/// are the allocator's zeroed pages, backed only when a position is written.
#[tokio::test]
async fn an_idle_server_does_not_hold_its_slab_in_memory() {
    let s = common::Spawned::ready(&["serve"], &[]).await;
    let rss = rss_kb_of(s.id());
    assert!(rss > 0, "read the server's RSS");
    assert!(rss < 300 * 1024, "idle RSS {} MB", rss / 1024);
}
