//! Overload, disconnects, limits, API keys and CORS against a real server with
//! the real model. The tests share one server and take turns (`turn()`).

mod common;

use std::time::{Duration, Instant};

use common::server_with;
use futures::StreamExt;
use serde_json::{Value, json};

const KEY: &str = "key-two";

fn url() -> &'static str {
    server_with(|c| {
        c.slots = 8;
        c.max_queued_requests = 64;
        c.api_keys = vec!["key-one".into(), KEY.into()];
        c.cors_origins = vec!["https://chat.example".into()];
        // No deadline here: the burst's queue takes as long as this machine needs
        // (tests/timeouts.rs has a server with one).
        c.request_timeout = 0.0;
        c.max_stop = 2;
        c.max_logit_bias = 2;
        c.max_top_logprobs = 3;
        c.max_prompts = 2;
        c.max_n = 2;
        c.max_prompt_tokens = 64;
        c.max_new_tokens = 900;
    })
}

/// One test at a time: they share the server's slots and queue.
async fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

async fn model() -> String {
    let v: Value = client()
        .get(format!("{}/v1/models", url()))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["data"][0]["id"].as_str().unwrap().to_string()
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn complete(body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let r = client()
        .post(format!("{}/v1/completions", url()))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

async fn metric(name: &str) -> f64 {
    common::metric(url(), name, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_200_over_a_small_queue_gets_429_at_once_and_the_rest_succeed() {
    let _t = turn().await;
    let m = model().await;
    let rejected_before = metric("sluice_requests_rejected_total{reason=\"queue_full\"}").await;
    let start = Instant::now();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let m = m.clone();
            tokio::spawn(async move {
                let body = json!({"model": m, "prompt": format!("Burst {i}: once upon a time"),
                                  "max_tokens": 8, "temperature": 0});
                let (s, h, v) = complete(body).await;
                (s, h, v, start.elapsed())
            })
        })
        .collect();
    let (mut ok, mut refused, mut slowest_refusal, mut slowest_ok) =
        (0, 0, Duration::ZERO, Duration::ZERO);
    for t in tasks {
        let (s, h, v, took) = t.await.unwrap();
        match s {
            200 => {
                assert_eq!(v["usage"]["completion_tokens"], 8, "{v}");
                ok += 1;
                slowest_ok = slowest_ok.max(took);
            }
            429 => {
                assert_eq!(h.get("retry-after").unwrap(), "1");
                assert_eq!(v["error"]["type"], "rate_limit_error");
                refused += 1;
                slowest_refusal = slowest_refusal.max(took);
            }
            other => panic!("unexpected {other}: {v}"),
        }
    }
    println!(
        "200 burst: {ok} served (last after {slowest_ok:?}), {refused} refused (last after {slowest_refusal:?})"
    );
    assert_eq!(ok + refused, 200);
    assert!(ok >= 64, "every queue place is used: {ok}");
    assert!(refused > 0, "the queue is bounded");
    assert!(
        slowest_refusal < slowest_ok,
        "refusals come before the queue drains"
    );
    let rejected = metric("sluice_requests_rejected_total{reason=\"queue_full\"}").await;
    assert_eq!(rejected - rejected_before, refused as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_clients_leaving_mid_stream_free_every_slot_within_a_second() {
    let _t = turn().await;
    let m = model().await;
    let mut streams = Vec::new();
    for i in 0..50 {
        let body = json!({"model": m, "prompt": format!("Client {i} asks for a long story"),
                          "max_tokens": 400, "ignore_eos": true, "stream": true});
        let r = client()
            .post(format!("{}/v1/completions", url()))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        streams.push(r.bytes_stream());
    }
    // Every slot busy, the others queued: all of them mid-stream.
    let t = Instant::now();
    while metric("sluice_kv_slots_used").await < 8.0 {
        assert!(t.elapsed() < Duration::from_secs(60), "slots never filled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for s in streams.iter_mut() {
        s.next().await.expect("a first chunk").unwrap();
    }
    drop(streams);
    let left = Instant::now();
    let mut freed = None;
    while left.elapsed() < Duration::from_secs(1) {
        if metric("sluice_kv_slots_used").await == 0.0
            && metric("sluice_requests_waiting").await == 0.0
        {
            freed = Some(left.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let freed = freed.expect("slots and queue empty within a second of the disconnects");
    println!("50 disconnects: slots free after {freed:?}");
    let (s, _, v) = complete(json!({"model": m, "prompt": "Next", "max_tokens": 4})).await;
    assert_eq!(s, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_limit_is_a_400_naming_it() {
    let _t = turn().await;
    let m = model().await;
    let long_prompt = "word ".repeat(200);
    let cases = [
        (json!({"stop": ["a", "b", "c"]}), "stop", "2"),
        (
            json!({"logit_bias": {"1": 1, "2": 1, "3": 1}}),
            "logit_bias",
            "2",
        ),
        (json!({"logprobs": 4}), "logprobs", "3"),
        (json!({"n": 3}), "n", "2"),
        (json!({"prompt": ["a", "b", "c"]}), "prompt", "2"),
        (json!({"prompt": long_prompt}), "prompt", "64"),
        (json!({"max_tokens": 901}), "max_tokens", "900"),
    ];
    for (extra, param, limit) in cases {
        let mut body = json!({"model": m, "prompt": "Hi", "max_tokens": 4});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (s, _, v) = complete(body.clone()).await;
        assert_eq!(s, 400, "{body}: {v}");
        assert_eq!(v["error"]["param"], param, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(limit),
            "the message names the limit {limit}: {msg}"
        );
    }
    // Body size: 64 KiB in the test configuration.
    let big = json!({"model": m, "prompt": "x".repeat(70_000)});
    let (s, _, v) = complete(big).await;
    assert_eq!(s, 413, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_keys_guard_the_api_but_not_operations() {
    let _t = turn().await;
    let base = url();
    for (method, path) in [
        ("GET", "/v1/models"),
        ("POST", "/v1/completions"),
        ("POST", "/tokenize"),
        ("POST", "/v1/chat/completions"),
    ] {
        for key in [None, Some("wrong")] {
            let mut r = client()
                .request(method.parse().unwrap(), format!("{base}{path}"))
                .json(&json!({}));
            if let Some(k) = key {
                r = r.bearer_auth(k);
            }
            let resp = r.send().await.unwrap();
            assert_eq!(resp.status(), 401, "{method} {path} with {key:?}");
            let v: Value = resp.json().await.unwrap();
            assert_eq!(v["error"]["type"], "authentication_error");
        }
    }
    let ok = client()
        .get(format!("{base}/v1/models"))
        .bearer_auth("key-one")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    for path in ["/health", "/ready", "/metrics"] {
        assert_eq!(
            reqwest::get(format!("{base}{path}"))
                .await
                .unwrap()
                .status(),
            200,
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cors_allows_only_the_configured_origin() {
    let _t = turn().await;
    let preflight = |origin: &'static str| {
        client()
            .request(
                reqwest::Method::OPTIONS,
                format!("{}/v1/chat/completions", url()),
            )
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type",
            )
            .send()
    };
    let r = preflight("https://chat.example").await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        r.headers().get("access-control-allow-origin").unwrap(),
        "https://chat.example"
    );
    let r = preflight("https://evil.example").await.unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
}
