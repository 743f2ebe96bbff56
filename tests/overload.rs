//! A full queue answers 429 at once, with `Retry-After` and OpenAI's error body, while the
//! admitted requests complete.

mod common;

use serde_json::{Value, json};

#[tokio::test]
async fn excess_requests_get_429_and_the_rest_complete() {
    let base = common::server_with(|c| {
        c.slots = 1;
        c.max_queued_requests = 2;
    });
    let client = reqwest::Client::new();
    let sends = (0..12).map(|i| {
        let client = client.clone();
        async move {
            let r = client
                .post(format!("{base}/v1/completions"))
                .json(&json!({"prompt": format!("Count to {i}:"), "max_tokens": 24, "temperature": 0, "ignore_eos": true}))
                .send()
                .await
                .expect("request");
            let status = r.status().as_u16();
            let retry = r.headers().get("retry-after").is_some();
            let body: Value = r.json().await.expect("json");
            (status, retry, body)
        }
    });
    let results = futures::future::join_all(sends).await;
    let ok = results.iter().filter(|r| r.0 == 200).count();
    let refused: Vec<_> = results.iter().filter(|r| r.0 == 429).collect();
    assert_eq!(ok + refused.len(), results.len(), "{results:?}");
    assert!(ok >= 1, "{results:?}");
    assert!(!refused.is_empty());
    for (_, retry, body) in refused {
        assert!(retry, "429 without Retry-After");
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert_eq!(body["error"]["code"], "queue_full");
    }
    for (status, _, body) in &results {
        if *status == 200 {
            assert_eq!(body["usage"]["completion_tokens"], 24);
        }
    }
}
