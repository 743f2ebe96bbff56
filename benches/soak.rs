//! Soak benchmark (not a test): a real server on the default model, 32 concurrent clients
//! sending random prompts, lengths and sampling parameters, streamed or not, 10% of them
//! leaving mid-answer, for `SLUICE_SOAK_SECONDS` (default 600). With faults on top: the
//! weights reloaded every 5 s (`keep` and `wait` in turn), a burst of 150 requests at once
//! every 12 s (over the queue limit of 64: some get 429, by design), and `/health` asked
//! every 200 ms (it must answer 200 within a second). Reports requests served, refused,
//! errors that the client did not cause (must be 0), p50/p99 time to first token of the
//! streamed requests, and the server's resident memory after a tenth of the run (at most a
//! minute, once the lazily backed KV slab is in use) and at the end. Its growth must stay
//! within what the KV pool's pages (`sluice_kv_pool_bytes`, backed on first use as the
//! prefix cache fills the pool) and a reload's second copy of the weights explain.
//!
//! `cargo bench --bench soak` (or `SLUICE_SOAK_SECONDS=60 cargo bench --bench soak`, which
//! `.ci/run` runs). Exits non-zero when any request, reload or probe failed, none was
//! served, the server is unhealthy afterwards, or its memory grew past that bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

const WORDS: &[&str] = &[
    "river", "light", "stone", "keeper", "valley", "morning", "boat", "bridge", "quiet", "story",
    "the", "and", "of", "a", "garden", "north", "wind", "lantern", "harbour", "ledger", "é",
    "日本",
];

/// xorshift64*: reproducible randomness without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// `sluice_kv_pool_bytes` from the server's `/metrics`.
async fn pool_bytes(base: &str) -> u64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with("sluice_kv_pool_bytes"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .expect("sluice_kv_pool_bytes in /metrics") as u64
}

#[derive(Default)]
struct Tally {
    served: AtomicUsize,
    left: AtomicUsize,
    /// 429s: the queue is full (the bursts fill it on purpose).
    refused: AtomicUsize,
    errors: AtomicUsize,
    reloads: AtomicUsize,
    probes: AtomicUsize,
}

const ADMIN: &str = "soak-admin-token";

/// Reloads the model file every 5 s, in `keep` and `wait` mode by turns.
async fn reloader(base: String, path: String, until: Instant, tally: Arc<Tally>) {
    let http = reqwest::Client::new();
    let mut keep = true;
    while Instant::now() + Duration::from_secs(5) < until {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let mode = if keep { "keep" } else { "wait" };
        keep = !keep;
        let r = http
            .post(format!("{base}/admin/reload"))
            .bearer_auth(ADMIN)
            .json(&json!({"path": path, "mode": mode}))
            .send()
            .await;
        match r {
            Ok(r) if r.status().is_success() => tally.reloads.fetch_add(1, Ordering::SeqCst),
            other => {
                eprintln!("reload failed: {other:?}");
                tally.errors.fetch_add(1, Ordering::SeqCst)
            }
        };
    }
}

/// Every 12 s, 150 short requests at once: each answered, or refused with a 429.
async fn bursts(base: String, model: String, until: Instant, tally: Arc<Tally>) {
    let http = reqwest::Client::new();
    while Instant::now() + Duration::from_secs(12) < until {
        tokio::time::sleep(Duration::from_secs(12)).await;
        let all: Vec<_> = (0..150)
            .map(|i| {
                let body = json!({"model": model, "prompt": format!("burst {i}"), "max_tokens": 2});
                http.post(format!("{base}/v1/completions"))
                    .json(&body)
                    .send()
            })
            .collect();
        for r in futures::future::join_all(all).await {
            match r.map(|r| r.status().as_u16()) {
                Ok(200) => tally.served.fetch_add(1, Ordering::SeqCst),
                Ok(429) => tally.refused.fetch_add(1, Ordering::SeqCst),
                other => {
                    eprintln!("burst request: {other:?}");
                    tally.errors.fetch_add(1, Ordering::SeqCst)
                }
            };
        }
    }
}

/// `/health` every 200 ms, each on a new connection: 200 within a second.
async fn prober(base: String, until: Instant, tally: Arc<Tally>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    while Instant::now() < until {
        let t = Instant::now();
        let r = http.get(format!("{base}/health")).send().await;
        match r {
            Ok(r) if r.status() == 200 && t.elapsed() < Duration::from_secs(1) => {
                tally.probes.fetch_add(1, Ordering::SeqCst)
            }
            other => {
                eprintln!("probe failed after {:?}: {other:?}", t.elapsed());
                tally.errors.fetch_add(1, Ordering::SeqCst)
            }
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn client(
    id: u64,
    base: String,
    model: String,
    until: Instant,
    tally: Arc<Tally>,
) -> Vec<f64> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (id + 1).wrapping_mul(0x1234_5678_9ABC_DEF1));
    let http = reqwest::Client::new();
    let mut ttfts = Vec::new();
    while Instant::now() < until {
        let words = 3 + rng.below(300) as usize;
        let prompt: Vec<&str> = (0..words)
            .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
            .collect();
        let stream = rng.below(2) == 0;
        let chat = rng.below(3) == 0;
        let mut body = json!({
            "model": model,
            "max_tokens": 1 + rng.below(200),
            "temperature": rng.unit() * 1.5,
            "top_p": 0.5 + rng.unit() / 2.0,
            "stream": stream,
        });
        if rng.below(4) == 0 {
            body["stop"] = json!([WORDS[rng.below(10) as usize]]);
        }
        if rng.below(5) == 0 {
            body["seed"] = json!(rng.below(1000));
        }
        let path = if chat {
            body["messages"] = json!([{"role": "user", "content": prompt.join(" ")}]);
            "/v1/chat/completions"
        } else {
            body["prompt"] = json!(prompt.join(" "));
            "/v1/completions"
        };
        let leave = rng.below(10) == 0;
        let start = Instant::now();
        let resp = match http.post(format!("{base}{path}")).json(&body).send().await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("request failed: {e}");
                tally.errors.fetch_add(1, Ordering::SeqCst);
                continue;
            }
        };
        if resp.status() == 429 {
            // As a well-behaved client does: wait as `Retry-After` says (1 s).
            tally.refused.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        if !resp.status().is_success() {
            eprintln!(
                "status {}: {}",
                resp.status(),
                resp.text().await.unwrap_or_default()
            );
            tally.errors.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        if !stream {
            if leave {
                drop(resp); // leaves before the answer
                tally.left.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            match resp.json::<Value>().await {
                Ok(v) if v["choices"].is_array() => tally.served.fetch_add(1, Ordering::SeqCst),
                other => {
                    eprintln!("not an answer: {other:?}");
                    tally.errors.fetch_add(1, Ordering::SeqCst)
                }
            };
            continue;
        }
        let mut s = resp.bytes_stream();
        let (mut buf, mut first, mut done, mut failed) = (String::new(), None, false, false);
        let quit_after = if leave {
            1 + rng.below(5) as usize
        } else {
            usize::MAX
        };
        let mut chunks = 0;
        while let Some(c) = s.next().await {
            let c = match c {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("stream broke after {chunks} events: {e}");
                    failed = true;
                    break;
                }
            };
            buf.push_str(&String::from_utf8_lossy(&c));
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                let Some(data) = event.trim().strip_prefix("data: ") else {
                    continue;
                };
                if data == "[DONE]" {
                    done = true;
                    continue;
                }
                chunks += 1;
                // Judge the event by its parsed shape, never by its text: the model may well
                // write the word "error" as content (a soak once failed on exactly that).
                let Ok(event) = serde_json::from_str::<serde_json::Value>(data) else {
                    eprintln!("event is not JSON: {data}");
                    failed = true;
                    continue;
                };
                if event.get("error").is_some() {
                    eprintln!("error event: {data}");
                    failed = true;
                }
                let choice = &event["choices"][0];
                let text = choice["text"]
                    .as_str()
                    .or_else(|| choice["delta"]["content"].as_str());
                let has_text = text.is_some_and(|t| !t.is_empty());
                if first.is_none() && has_text {
                    first = Some(start.elapsed().as_secs_f64());
                }
            }
            if chunks >= quit_after {
                break;
            }
        }
        if leave {
            tally.left.fetch_add(1, Ordering::SeqCst);
        } else if done && !failed {
            tally.served.fetch_add(1, Ordering::SeqCst);
            ttfts.extend(first);
        } else {
            if !done {
                eprintln!("stream ended without [DONE] after {chunks} events");
            }
            tally.errors.fetch_add(1, Ordering::SeqCst);
        }
    }
    ttfts
}

fn main() {
    let seconds: u64 = std::env::var("SLUICE_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    use clap::Parser;
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: sluice::config::ServeArgs,
    }
    let mut args = Wrap::parse_from(["soak"]).args;
    args.slots = 16;
    args.context = Some(1024);
    args.max_queued_requests = 64;
    args.admin_token = Some(ADMIN.into());
    let config = args.config().expect("a valid configuration");
    let model = config.model().name.clone();
    let path = config.model().path.display().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let on_ready = move |_: &sluice::http::AppState| {
            let _ = ready_tx.send(());
        };
        tokio::spawn(sluice::run_with(
            listener,
            config,
            std::future::pending(),
            on_ready,
        ));
        ready_rx.await.expect("run scripts/fetch-model first");
        // Warm-up, then the starting footprint.
        let warm = json!({"model": model, "prompt": "warm up", "max_tokens": 8});
        reqwest::Client::new()
            .post(format!("{base}/v1/completions"))
            .json(&warm)
            .send()
            .await
            .unwrap();
        let until = Instant::now() + Duration::from_secs(seconds);
        // The starting footprint is taken once the load has run for a tenth of the time
        // (at most a minute): the KV slab's pages are backed lazily, on first use.
        let warm = Duration::from_secs((seconds / 10).clamp(1, 60));
        let rss0 = tokio::spawn(async move {
            tokio::time::sleep(warm).await;
            rss_kb()
        });
        let tally = Arc::new(Tally::default());
        let clients: Vec<_> = (0..32)
            .map(|i| tokio::spawn(client(i, base.clone(), model.clone(), until, tally.clone())))
            .collect();
        let faults = [
            tokio::spawn(reloader(base.clone(), path.clone(), until, tally.clone())),
            tokio::spawn(bursts(base.clone(), model.clone(), until, tally.clone())),
            tokio::spawn(prober(base.clone(), until, tally.clone())),
        ];
        let mut ttfts = Vec::new();
        for c in clients {
            ttfts.extend(c.await.unwrap());
        }
        for f in faults {
            f.await.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (rss0, rss1) = (rss0.await.unwrap(), rss_kb());
        // What may legitimately grow: the KV pool's pages, backed on first use as the prefix
        // cache fills the pool, and a reload's second copy of the weights (two, with
        // margin: the packed form is about the file's size).
        let pool_mb = pool_bytes(&base).await / (1 << 20);
        let file_mb = std::fs::metadata(&path).map_or(0, |m| m.len()) / (1 << 20);
        let allowed_mb = pool_mb + 2 * file_mb + 64;
        let grown_mb = rss1.saturating_sub(rss0) / 1024;
        ttfts.sort_by(f64::total_cmp);
        let q = |p: f64| {
            ttfts
                .get(((ttfts.len() as f64 - 1.0) * p) as usize)
                .copied()
                .unwrap_or(0.0)
                * 1e3
        };
        println!(
            "soak {seconds} s, 32 clients: {} requests served, {} left mid-answer (10% by design), \
             {} refused (429, the bursts), {} errors; {} reloads, {} probes; \
             TTFT p50 {:.0} ms, p99 {:.0} ms ({} streamed); RSS {} MB -> {} MB ({:+.1}%; \
             the KV pool reserves {pool_mb} MB, backed on first use; growth allowed \
             {allowed_mb} MB)",
            tally.served.load(Ordering::SeqCst),
            tally.left.load(Ordering::SeqCst),
            tally.refused.load(Ordering::SeqCst),
            tally.errors.load(Ordering::SeqCst),
            tally.reloads.load(Ordering::SeqCst),
            tally.probes.load(Ordering::SeqCst),
            q(0.5),
            q(0.99),
            ttfts.len(),
            rss0 / 1024,
            rss1 / 1024,
            (rss1 as f64 / rss0.max(1) as f64 - 1.0) * 100.0
        );
        let health = reqwest::get(format!("{base}/health"))
            .await
            .unwrap()
            .status();
        println!("health after the soak: {health}");
        let (served, errors) = (
            tally.served.load(Ordering::SeqCst),
            tally.errors.load(Ordering::SeqCst),
        );
        let leaked = grown_mb > allowed_mb;
        if errors > 0 || served == 0 || !health.is_success() || leaked {
            eprintln!(
                "soak failed: {errors} errors, {served} served, health {health}, \
                 resident memory grew {grown_mb} MB (allowed {allowed_mb})"
            );
            std::process::exit(1);
        }
    });
}
