//! A thousand streaming requests at once against a real server on the default model
//! (`--max-queued-requests 1024`): each one ends with `[DONE]` or is refused with a 429,
//! nothing else (no broken stream, no other status); `/health` answers within a second
//! throughout; and the server's resident memory stays under `RSS_BOUND_MB`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::Spawned;
use futures::StreamExt;
use serde_json::json;

const STREAMS: usize = 1000;

/// The server's resident memory may not pass this at any time under the load (measured
/// at 183 MB on the 2-core test machine; the README's "Load" section).
const RSS_BOUND_MB: u64 = 512;

fn rss_mb(pid: u32) -> u64 {
    common::proc_kb(&format!("{pid}/status"), "VmRSS").unwrap_or(0) / 1024
}

/// How one request ended.
#[derive(Debug, PartialEq)]
enum End {
    Done,
    Refused,
    Failed(String),
}

async fn one(c: reqwest::Client, base: String, i: usize) -> End {
    let body = json!({
        "prompt": format!("Request {i} asks about the river town and its"),
        "max_tokens": 4,
        "temperature": 0.8,
        "seed": i,
        "stream": true,
    });
    let r = match c
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return End::Failed(format!("send: {e}")),
    };
    match r.status().as_u16() {
        200 => {}
        429 => return End::Refused,
        s => {
            return End::Failed(format!(
                "status {s}: {}",
                r.text().await.unwrap_or_default()
            ));
        }
    }
    let mut raw = Vec::new();
    let mut s = r.bytes_stream();
    while let Some(b) = s.next().await {
        match b {
            Ok(b) => raw.extend_from_slice(&b),
            Err(e) => return End::Failed(format!("stream broke: {e}")),
        }
    }
    let raw = String::from_utf8_lossy(&raw);
    match common::sse::finished(&raw) {
        Ok(_) => End::Done,
        Err(e) => End::Failed(e),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_streams_complete_or_are_refused_and_health_answers() {
    let server = Spawned::ready(&["serve", "--max-queued-requests", "1024"], &[]).await;
    let (base, pid) = (server.base.clone(), server.id());
    let running = Arc::new(AtomicBool::new(true));
    let (worst_health_ms, peak_rss) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let watcher = {
        let (running, worst, peak, base) = (
            running.clone(),
            worst_health_ms.clone(),
            peak_rss.clone(),
            base.clone(),
        );
        // On a thread and runtime of its own: on the test's runtime the probe would wait
        // behind the thousand streams' tasks to be polled, and its time would count the
        // test client's queue, not the server's answer.
        let probe = async move {
            let c = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .pool_max_idle_per_host(0)
                .build()
                .unwrap();
            let mut bad = Vec::new();
            while running.load(Ordering::SeqCst) {
                let t = Instant::now();
                match c.get(format!("{base}/health")).send().await {
                    Ok(r) if r.status() == 200 => {}
                    other => bad.push(format!("{other:?}")),
                }
                worst.fetch_max(t.elapsed().as_millis() as u64, Ordering::SeqCst);
                peak.fetch_max(rss_mb(pid), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            bad
        };
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the probe's runtime")
                .block_on(probe)
        })
    };
    let c = reqwest::Client::new();
    let start = Instant::now();
    let all: Vec<_> = (0..STREAMS)
        .map(|i| tokio::spawn(one(c.clone(), base.clone(), i)))
        .collect();
    let mut ends = Vec::new();
    for h in all {
        ends.push(h.await.unwrap());
    }
    let took = start.elapsed();
    running.store(false, Ordering::SeqCst);
    let bad_health = watcher.join().expect("the health probe");
    let done = ends.iter().filter(|e| **e == End::Done).count();
    let refused = ends.iter().filter(|e| **e == End::Refused).count();
    let failed: Vec<_> = ends
        .iter()
        .filter(|e| matches!(e, End::Failed(_)))
        .collect();
    let (worst, peak) = (
        worst_health_ms.load(Ordering::SeqCst),
        peak_rss.load(Ordering::SeqCst),
    );
    println!(
        "{STREAMS} streams in {:.1} s: {done} done, {refused} refused (429), {} failed; \
         /health worst {worst} ms; peak RSS {peak} MB",
        took.as_secs_f64(),
        failed.len()
    );
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(5)]);
    assert_eq!(done + refused, STREAMS);
    assert!(done > 0);
    assert!(bad_health.is_empty(), "{bad_health:?}");
    assert!(worst < 1000, "/health took {worst} ms under the load");
    assert!(peak > 0 && peak < RSS_BOUND_MB, "peak RSS {peak} MB");
}
