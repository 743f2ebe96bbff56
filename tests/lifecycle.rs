//! Start-up and shutdown: while the model loads `/health` is 200 and `/ready` 503; on
//! SIGTERM `/ready` turns 503, new requests are refused, in-flight streams complete, and
//! the process exits 0.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

fn spawn(model: &std::path::Path, port: u16, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--port", &port.to_string(), "--context", "512"])
        .args(extra)
        .env("SLUICE_MODEL", model)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sluice serve starts")
}

async fn status(url: &str) -> Option<u16> {
    reqwest::get(url).await.ok().map(|r| r.status().as_u16())
}

#[tokio::test]
async fn not_ready_while_the_model_loads() {
    // A FIFO as the model file: opening it blocks until a writer appears, so the server
    // stays in its loading state for as long as the test wants.
    let fifo = std::env::temp_dir().join(format!("sluice-fifo-{}.gguf", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let port = common::free_port();
    let mut child = spawn(&fifo, port, &[]);
    let base = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    while status(&format!("{base}/health")).await.is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "server did not listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    // Unblock the loader with an empty file: loading fails and the server exits non-zero.
    drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    let code = child.wait().unwrap();
    assert!(!code.success());
    let _ = std::fs::remove_file(&fifo);
}

#[tokio::test]
async fn sigterm_drains_in_flight_streams_then_exits_zero() {
    let port = common::free_port();
    let mut child = spawn(&common::model_path(), port, &["--slots", "8"]);
    let base = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    while status(&format!("{base}/ready")).await != Some(200) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "server not ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = reqwest::Client::new();
    let mut streams = Vec::new();
    for i in 0..8 {
        let r = client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"prompt": format!("Story {i}:"), "max_tokens": 60, "ignore_eos": true, "stream": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut s = r.bytes_stream();
        let first = s.next().await.unwrap().unwrap();
        streams.push((first, s));
    }
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        status(&format!("{base}/ready")).await,
        Some(503),
        "/ready during drain"
    );
    assert_eq!(
        status(&format!("{base}/health")).await,
        Some(200),
        "/health during drain"
    );
    let refused = client
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    for (first, mut s) in streams {
        let mut body = String::from_utf8(first.to_vec()).unwrap();
        while let Some(chunk) = s.next().await {
            body.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        }
        assert!(
            body.trim_end().ends_with("data: [DONE]"),
            "stream cut short: {body}"
        );
        assert!(body.contains("\"finish_reason\":\"length\""));
    }
    let code = child.wait().unwrap();
    assert!(code.success(), "exit status {code:?}");
}
