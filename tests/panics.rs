//! Panics are contained: a handler panic is a 500 in OpenAI's shape and the server goes on;
//! an engine panic ends every in-flight request with an error (no hang), turns `/health`
//! to 503 and refuses new work with 503. Panics are injected with `SLUICE_FAILPOINTS` in a
//! server process of its own.

mod common;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use sluice::engine::testing::TRIGGER;

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_and_engine_panics_are_contained() {
    let server = common::Spawned::ready(
        &["serve", "--context", "2048", "--served-model-name", "m"],
        &[("SLUICE_FAILPOINTS", "engine-panic,handler-panic")],
    )
    .await;
    let base = server.base.clone();

    // A handler panic: 500, OpenAI-shaped, and the server keeps serving.
    let (s, v) = post(&format!("{base}/tokenize"), &json!({"prompt": TRIGGER})).await;
    assert_eq!(s, 500, "{v}");
    assert_eq!(v["error"]["type"], "server_error");
    let (s, _) = post(&format!("{base}/tokenize"), &json!({"prompt": "fine"})).await;
    assert_eq!(s, 200);
    assert_eq!(
        reqwest::get(format!("{base}/health"))
            .await
            .unwrap()
            .status(),
        200
    );

    // An engine panic while a stream is running: the stream ends with an error chunk.
    // Greedy, no end token, 2000 tokens: it is still running whenever the panic comes.
    let body = json!({"model": "m", "prompt": "A long story", "max_tokens": 2000,
                      "ignore_eos": true, "temperature": 0, "stream": true});
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut stream = resp.bytes_stream();
    stream.next().await.unwrap().unwrap();
    let trip = tokio::spawn({
        let base = base.clone();
        async move {
            post(
                &format!("{base}/v1/completions"),
                &json!({"model": "m", "prompt": TRIGGER, "max_tokens": 4}),
            )
            .await
        }
    });
    let rest = tokio::time::timeout(Duration::from_secs(30), async {
        let mut text = String::new();
        while let Some(c) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&c.unwrap()));
        }
        text
    })
    .await
    .expect("the running stream ends instead of hanging");
    assert!(
        !common::sse_errors(&rest).is_empty(),
        "an error chunk ends the stream: {rest}"
    );
    let (s, v) = tokio::time::timeout(Duration::from_secs(30), trip)
        .await
        .expect("no hang")
        .unwrap();
    assert!(s >= 500, "{s}: {v}");
    assert_eq!(
        reqwest::get(format!("{base}/health"))
            .await
            .unwrap()
            .status(),
        503
    );
    let (s, v) = post(
        &format!("{base}/v1/completions"),
        &json!({"model": "m", "prompt": "Hi", "max_tokens": 2}),
    )
    .await;
    assert_eq!(s, 503, "{v}");
    drop(server);
}
