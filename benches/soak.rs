//! Soak benchmark (not a test): a real server on the default model, 32 concurrent clients
//! sending random prompts, lengths and sampling parameters, streamed or not, 10% of them
//! leaving mid-answer, for `SLUICE_SOAK_SECONDS` (default 600). Reports requests served,
//! errors that the client did not cause (must be 0), p50/p99 time to first token of the
//! streamed requests, and the server's resident memory after a tenth of the run (at most a
//! minute, once the lazily backed KV slab is in use) and at the end.
//!
//! `cargo bench --bench soak` (or `SLUICE_SOAK_SECONDS=60 cargo bench --bench soak`, which
//! `.ci/run` runs). Exits non-zero when any request failed, none was served, or the server
//! is unhealthy afterwards.

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

#[derive(Default)]
struct Tally {
    served: AtomicUsize,
    left: AtomicUsize,
    errors: AtomicUsize,
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
                if data.contains("\"error\"") {
                    eprintln!("error event: {data}");
                    failed = true;
                }
                let has_text = data.contains("\"text\":\"") && !data.contains("\"text\":\"\"")
                    || data.contains("\"content\":\"") && !data.contains("\"content\":\"\"");
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
    let config = args.config().expect("a valid configuration");
    let model = config.model.name.clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let on_ready = move |_: &sluice::http::AppState| {
            let _ = ready_tx.send(());
        };
        tokio::spawn(sluice::run_with(listener, config, std::future::pending(), on_ready));
        ready_rx.await.expect("run scripts/fetch-model first");
        // Warm-up, then the starting footprint.
        let warm = json!({"model": model, "prompt": "warm up", "max_tokens": 8});
        reqwest::Client::new().post(format!("{base}/v1/completions")).json(&warm).send().await.unwrap();
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
        let mut ttfts = Vec::new();
        for c in clients {
            ttfts.extend(c.await.unwrap());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (rss0, rss1) = (rss0.await.unwrap(), rss_kb());
        ttfts.sort_by(f64::total_cmp);
        let q = |p: f64| ttfts.get(((ttfts.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(0.0) * 1e3;
        println!(
            "soak {seconds} s, 32 clients: {} requests served, {} left mid-answer (10% by design), {} errors; \
             TTFT p50 {:.0} ms, p99 {:.0} ms ({} streamed); RSS {} MB -> {} MB ({:+.1}%)",
            tally.served.load(Ordering::SeqCst),
            tally.left.load(Ordering::SeqCst),
            tally.errors.load(Ordering::SeqCst),
            q(0.5),
            q(0.99),
            ttfts.len(),
            rss0 / 1024,
            rss1 / 1024,
            (rss1 as f64 / rss0.max(1) as f64 - 1.0) * 100.0
        );
        let health = reqwest::get(format!("{base}/health")).await.unwrap().status();
        println!("health after the soak: {health}");
        let (served, errors) = (tally.served.load(Ordering::SeqCst), tally.errors.load(Ordering::SeqCst));
        if errors > 0 || served == 0 || !health.is_success() {
            eprintln!("soak failed: {errors} errors, {served} served, health {health}");
            std::process::exit(1);
        }
    });
}
