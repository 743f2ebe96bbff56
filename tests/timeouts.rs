//! `--request-timeout` bounds a whole request, queue included: past it a request ends
//! with a 504, or an error chunk when streaming, and is counted as a timeout.

mod common;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn url() -> &'static str {
    common::server_with(|c| {
        c.slots = 2;
        c.context = Some(2048);
        // One second: 2000 tokens take far longer on any CPU this runs on.
        c.request_timeout = 1.0;
    })
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn complete(body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = client()
        .post(format!("{}/v1/completions", url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let (s, h) = (r.status().as_u16(), r.headers().clone());
    (s, h, r.json().await.unwrap_or(Value::Null))
}

async fn metric(name: &str) -> f64 {
    common::metric(url(), name, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_past_the_timeout_end_with_504_or_an_error_chunk() {
    let long = json!({"prompt": "Tell a very long story", "max_tokens": 2000,
                      "ignore_eos": true});
    let t = Instant::now();
    let (s, _, v) = complete(long.clone()).await;
    assert_eq!(s, 504, "{v}");
    assert_eq!(v["error"]["code"], "timeout");
    assert!(t.elapsed() < Duration::from_secs(30));
    let mut body = long;
    body["stream"] = json!(true);
    let text = client()
        .post(format!("{}/v1/completions", url()))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = common::sse::events(&text);
    let last = events.last().expect("events").error();
    assert!(
        last.as_ref().is_some_and(|e| e["code"] == "timeout"),
        "the stream ends with a timeout error: {last:?}"
    );
    assert!(
        metric("sluice_requests_total{finish_reason=\"timeout\",route=\"completions\"}").await
            >= 2.0
    );
}
