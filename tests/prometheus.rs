//! A real Prometheus server (Debian's package; `scripts/test-deps` installs it) scrapes a
//! real sluice under a short load; its query API then reports exactly the tokens and
//! requests the test saw, and `promtool check metrics` finds no problem in the exposition.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

async fn query(prom: &str, q: &str) -> Option<f64> {
    let r: Value = reqwest::Client::new()
        .get(format!("{prom}/api/v1/query"))
        .query(&[("query", q)])
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    r["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

#[tokio::test]
async fn prometheus_scrapes_exact_counts() {
    let base = common::server();
    let target = base.trim_start_matches("http://");
    let dir = common::scratch("prometheus");
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: sluice\n    static_configs:\n      - targets: ['{target}']\n"),
    )
    .unwrap();
    let port = common::free_port();
    let prom = format!("http://127.0.0.1:{port}");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus on PATH (scripts/test-deps installs Debian's package)");
    let child = common::KillOnDrop(child);

    // A short load: 6 requests, 3 at a time.
    let client = reqwest::Client::new();
    let mut received = 0.0;
    for round in 0..2 {
        let answers = futures::future::join_all((0..3).map(|i| {
            client
                .post(format!("{base}/v1/completions"))
                .json(&json!({"prompt": format!("Item {round}-{i}:"), "max_tokens": 7, "ignore_eos": true, "temperature": 0.5, "seed": i}))
                .send()
        }))
        .await;
        for a in answers {
            let v: Value = a.unwrap().json().await.unwrap();
            received += v["usage"]["completion_tokens"].as_f64().unwrap();
        }
    }
    assert_eq!(received, 42.0);

    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut tokens, mut ttft, mut requests) = (None, None, None);
    while Instant::now() < deadline {
        tokens = query(&prom, "sluice_generation_tokens_total").await;
        ttft = query(&prom, "sluice_time_to_first_token_seconds_count").await;
        requests = query(
            &prom,
            r#"sum(sluice_requests_total{route="completions",finish_reason="length"})"#,
        )
        .await;
        if tokens == Some(received) && ttft == Some(6.0) && requests == Some(6.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let up = query(&prom, r#"up{job="sluice"}"#).await;
    drop(child);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(up, Some(1.0));
    assert_eq!(
        tokens,
        Some(received),
        "generation tokens seen by Prometheus"
    );
    assert_eq!(ttft, Some(6.0), "TTFT histogram count");
    assert_eq!(requests, Some(6.0));

    let exposition = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool on PATH");
    lint.stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = lint.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
