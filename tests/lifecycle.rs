//! Start-up and shutdown: while the model loads `/health` is 200 and `/ready` 503; on
//! SIGTERM `/ready` turns 503, new requests are refused, in-flight streams complete, and
//! the process exits 0. `--shutdown-grace` is a deadline: streams still open then end with
//! an error chunk and the process exits 0 within the grace period and a second.

mod common;

use std::time::{Duration, Instant};

use common::Spawned;
use futures::StreamExt;
use serde_json::json;

async fn status(url: &str) -> Option<u16> {
    reqwest::get(url).await.ok().map(|r| r.status().as_u16())
}

#[tokio::test]
async fn not_ready_while_the_model_loads() {
    // A FIFO as the model file: opening it blocks until a writer appears, so the server
    // stays in its loading state for as long as the test wants.
    let fifo = common::scratch("lifecycle").join("loading.gguf");
    let _ = std::fs::remove_file(&fifo);
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let model = fifo.to_str().unwrap();
    let mut server = Spawned::start(&["serve", "--context", "512"], &[("SLUICE_MODEL", model)]);
    let base = server.base.clone();
    assert_eq!(status(&format!("{base}/health")).await, Some(200));
    assert_eq!(status(&format!("{base}/ready")).await, Some(503));
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("loading")
    );
    // Unblock the loader (a FIFO cannot be memory-mapped): loading fails and the server
    // exits non-zero, saying why.
    drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    let code = server.wait();
    assert!(!code.success());
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("cannot open model file") && l.contains(model)),
        "{:?}",
        server.log()
    );
    let _ = std::fs::remove_file(&fifo);
}

async fn start_streams(
    base: &str,
    n: usize,
    max_tokens: usize,
) -> Vec<(
    String,
    impl futures::Stream<Item = reqwest::Result<bytes::Bytes>>,
)> {
    let client = reqwest::Client::new();
    let mut streams = Vec::new();
    for i in 0..n {
        let r = client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"prompt": format!("Story {i}:"), "max_tokens": max_tokens, "ignore_eos": true, "stream": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut s = r.bytes_stream();
        let first = s.next().await.unwrap().unwrap();
        streams.push((String::from_utf8(first.to_vec()).unwrap(), s));
    }
    streams
}

async fn read_all(
    first: String,
    mut s: impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
) -> String {
    let mut body = first;
    while let Some(chunk) = s.next().await {
        match chunk {
            Ok(c) => body.push_str(std::str::from_utf8(&c).unwrap()),
            Err(_) => break,
        }
    }
    body
}

#[tokio::test]
async fn sigterm_drains_in_flight_streams_then_exits_zero() {
    let mut server = Spawned::ready(&["serve", "--context", "512", "--slots", "8"], &[]).await;
    let base = server.base.clone();
    let streams = start_streams(&base, 8, 60).await;
    server.terminate();
    // Draining is observable once /ready says so; poll that, not the clock.
    let start = Instant::now();
    while status(&format!("{base}/ready")).await != Some(503) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "/ready during drain"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        status(&format!("{base}/health")).await,
        Some(200),
        "/health during drain"
    );
    let refused = reqwest::Client::new()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    for (first, s) in streams {
        let body = read_all(first, Box::pin(s)).await;
        let chunks =
            common::sse::finished(&body).unwrap_or_else(|e| panic!("stream cut short: {e}"));
        assert!(
            chunks
                .iter()
                .any(|v| v["choices"][0]["finish_reason"] == "length")
        );
    }
    let code = server.wait();
    assert!(code.success(), "exit status {code:?}");
}

#[tokio::test]
async fn the_shutdown_grace_is_a_deadline() {
    let grace = 2.0;
    let mut server = Spawned::ready(
        &[
            "serve",
            "--context",
            "1024",
            "--slots",
            "2",
            "--shutdown-grace",
            "2",
        ],
        &[],
    )
    .await;
    let base = server.base.clone();
    // 1000 tokens take far longer than the grace period on any machine this runs on.
    let streams = start_streams(&base, 2, 1000).await;
    let signalled = Instant::now();
    server.terminate();
    for (first, s) in streams {
        let body = read_all(first, Box::pin(s)).await;
        assert!(
            common::sse_errors(&body).iter().any(|e| e["message"]
                .as_str()
                .is_some_and(|m| m.contains("shutting down"))),
            "an error chunk ends the stream: {}",
            &body[body.len().saturating_sub(400)..]
        );
        assert!(
            !common::sse::events(&body)
                .iter()
                .any(common::sse::Event::is_done)
        );
    }
    let code = server.wait();
    let took = signalled.elapsed().as_secs_f64();
    assert!(code.success(), "exit status {code:?}");
    assert!(
        took < grace + 1.0,
        "exited {took:.2} s after SIGTERM, grace {grace} s"
    );
}
