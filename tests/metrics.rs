//! `/metrics` counts exactly what the test did: tokens, requests by finish reason,
//! rejections, cancellations, prefill buckets, TTFT observations, HTTP statuses; and
//! `/health` and `/ready` answer.

mod common;

use futures::StreamExt;
use serde_json::{Value, json};

/// The value of one sample, `name{labels}` with labels in the exposition's order.
/// A series' value (0 when absent), named without the `model` label every engine series
/// carries (this server has one model).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(common::without_model)
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .map(str::to_string)
        })
        .map(|v| v.trim().parse().expect("numeric sample"))
        .unwrap_or(0.0)
}

#[test]
fn the_model_label_is_taken_out() {
    assert_eq!(common::without_model("a{model=\"m\"} 1"), "a 1");
    assert_eq!(
        common::without_model("a{model=\"m\",b=\"c\"} 1"),
        "a{b=\"c\"} 1"
    );
    assert_eq!(
        common::without_model("a{b=\"c\",model=\"m\"} 1"),
        "a{b=\"c\"} 1"
    );
    assert_eq!(common::without_model("a 1"), "a 1");
}

async fn scrape(base: &str) -> String {
    let r = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    r.text().await.unwrap()
}

#[tokio::test]
async fn counters_and_histograms_match_the_requests_made() {
    let base = common::server_with(|c| {
        c.slots = 1;
        c.max_queued_requests = 1;
    });
    let client = reqwest::Client::new();
    for path in ["/health", "/ready"] {
        let r = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let before = scrape(base).await;
    assert_eq!(sample(&before, "sluice_kv_slots_capacity"), 1.0);
    // The pool's bytes: blocks x 16 positions x (keys and values) x the default model's 30
    // layers x 3 KV heads x 64 dimensions x 2 bytes (f16).
    let blocks = sample(&before, "sluice_kv_blocks_capacity");
    assert!(blocks > 0.0);
    assert_eq!(
        sample(&before, "sluice_kv_pool_bytes"),
        blocks * 16.0 * 2.0 * 30.0 * 3.0 * 64.0 * 2.0
    );
    assert_eq!(sample(&before, "sluice_requests_running"), 0.0);

    // Three greedy completions, one at a time: 5 tokens each.
    let (mut generated, mut prompted) = (0.0, 0.0);
    for i in 0..3 {
        let r: Value = common::post_json(&format!("{base}/v1/completions"), &json!({"prompt": format!("Number {i} is"), "max_tokens": 5, "temperature": 0, "ignore_eos": true})).await;
        generated += r["usage"]["completion_tokens"].as_f64().unwrap();
        prompted += r["usage"]["prompt_tokens"].as_f64().unwrap();
    }
    // One chat answer that ends on its own end token.
    let r: Value = common::post_json(&format!("{base}/v1/chat/completions"), &json!({"messages": [{"role": "user", "content": "What is the capital of Germany?"}], "temperature": 0, "max_tokens": 40})).await;
    assert_eq!(r["choices"][0]["finish_reason"], "stop");
    generated += r["usage"]["completion_tokens"].as_f64().unwrap();
    prompted += r["usage"]["prompt_tokens"].as_f64().unwrap();
    // Exactly these requests' tokens (start-up's warm-up pass is not counted; no two of
    // these prompts share a prefix long enough to be reused).
    let now = scrape(base).await;
    assert_eq!(sample(&now, "sluice_generation_tokens_total"), generated);
    assert_eq!(sample(&now, "sluice_prompt_tokens_total"), prompted);
    assert_eq!(
        sample(&now, "sluice_e2e_request_latency_seconds_count"),
        4.0
    );
    assert_eq!(
        sample(&now, "sluice_time_to_first_token_seconds_count"),
        4.0
    );
    // A burst while one long request holds the only slot: the excess is refused.
    let long = client
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "Tell a story.", "max_tokens": 400, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    let mut long = long.bytes_stream();
    long.next().await.unwrap().unwrap();
    let burst: Vec<_> = (0..4)
        .map(|_| {
            let req = client
                .post(format!("{base}/v1/completions"))
                .json(&json!({"prompt": "Hi", "max_tokens": 2, "ignore_eos": true}));
            tokio::spawn(async move { req.send().await.unwrap().status().as_u16() })
        })
        .collect();
    // Refusals come back at once; the one queued request waits for the slot. Wait until
    // the server has seen all four (three refused, one waiting) before the long one leaves.
    let refused_before = sample(
        &before,
        "sluice_requests_rejected_total{reason=\"queue_full\"}",
    );
    let seen = std::time::Instant::now();
    loop {
        let m = scrape(base).await;
        let refused = sample(&m, "sluice_requests_rejected_total{reason=\"queue_full\"}");
        if refused - refused_before >= 3.0 && sample(&m, "sluice_requests_waiting") == 1.0 {
            break;
        }
        assert!(seen.elapsed() < std::time::Duration::from_secs(60), "{m}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The client of the long request leaves: its request is cancelled, the queued one runs.
    drop(long);
    let mut statuses = Vec::new();
    for h in burst {
        statuses.push(h.await.unwrap());
    }
    let refused = statuses.iter().filter(|s| **s == 429).count() as f64;
    assert!(refused >= 3.0, "{statuses:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut after;
    loop {
        after = scrape(base).await;
        let done = sample(&after, "sluice_requests_running") == 0.0
            && sample(&after, "sluice_requests_waiting") == 0.0;
        if done || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let streamed_before_cancel =
        sample(&after, "sluice_generation_tokens_total") - generated - 2.0 * (4.0 - refused);
    assert!(
        streamed_before_cancel >= 1.0,
        "the long request streamed at least one token"
    );
    assert_eq!(sample(&after, "sluice_kv_slots_used"), 0.0);
    assert_eq!(
        sample(
            &after,
            r#"sluice_requests_total{finish_reason="length",route="completions"}"#
        ),
        3.0 + (4.0 - refused)
    );
    assert_eq!(
        sample(
            &after,
            r#"sluice_requests_total{finish_reason="stop",route="chat"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(
            &after,
            r#"sluice_requests_total{finish_reason="cancelled",route="completions"}"#
        ),
        1.0
    );
    assert_eq!(
        sample(
            &after,
            r#"sluice_requests_rejected_total{reason="queue_full"}"#
        ),
        refused
    );
    let engine_requests = 3.0 + 1.0 + 1.0 + (4.0 - refused);
    assert_eq!(
        sample(&after, "sluice_time_to_first_token_seconds_count"),
        engine_requests
    );
    assert_eq!(
        sample(&after, "sluice_e2e_request_latency_seconds_count"),
        engine_requests - 1.0
    );
    let bucketed: f64 = ["16", "32", "64"]
        .iter()
        .map(|b| {
            sample(
                &after,
                &format!("sluice_prefill_requests_total{{bucket=\"{b}\"}}"),
            )
        })
        .sum();
    assert_eq!(bucketed, engine_requests);
    assert_eq!(
        sample(
            &after,
            r#"sluice_http_requests_total{route="/v1/completions",status="429"}"#
        ),
        refused
    );
    // Probes and scrapes are the platform's traffic, not the users': never counted.
    for route in ["/health", "/ready", "/metrics"] {
        assert!(
            !after.contains(&format!(r#"route="{route}""#)),
            "{route} is counted"
        );
    }
    assert!(sample(&after, "sluice_prefill_padding_tokens_total") > 0.0);
    let info = after
        .lines()
        .find(|l| l.starts_with("sluice_build_info{"))
        .expect("build info");
    assert!(
        info.contains(r#"version=""#) && info.contains(r#"model="SmolLM2-135M-Instruct.Q4_1""#),
        "{info}"
    );
}
