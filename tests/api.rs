//! The HTTP API against a real server with the real model: SSE framing, the equality of
//! streamed and whole answers, and every error status in OpenAI's error shape.

mod common;

use futures::StreamExt;
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(path: &str, body: Value) -> (u16, Value) {
    let url = format!("{}{path}", common::server());
    let r = client()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.expect("JSON body"))
}

/// The `data:` payloads of an SSE response, in order.
async fn sse(path: &str, body: Value) -> Vec<String> {
    let url = format!("{}{path}", common::server());
    let r = client()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let raw = common::sse::body(r).await.expect("the whole stream");
    common::sse::events(&raw)
        .into_iter()
        .map(|e| e.data)
        .collect()
}

#[test]
fn sse_events_are_read_by_the_format() {
    use common::sse::{chunks, events};
    let raw = "event: a\ndata: {\"x\":1}\n\n: comment\ndata:{\"y\":\ndata: 2}\n\r\ndata: [DONE]\n\ndata: cut";
    let e = events(raw);
    assert_eq!(e.len(), 3, "{e:?}");
    assert_eq!(e[0].name.as_deref(), Some("a"));
    assert_eq!(e[0].json().unwrap()["x"], 1);
    assert_eq!(e[1].data, "{\"y\":\n2}");
    assert_eq!(e[1].json().unwrap()["y"], 2);
    assert!(e[2].is_done() && e[2].name.is_none());
    let (values, done) = chunks(raw);
    assert_eq!(values.len(), 2);
    assert!(done);
    assert!(!chunks("data: {}\n\n").1);
    let err = "data: {\"error\": {\"message\": \"m\"}}\n\ndata: {\"text\": \"error\"}\n\n";
    assert_eq!(common::sse_errors(err).len(), 1);
}

fn assert_openai_error(body: &Value, param: Option<&str>) {
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{body}"
    );
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
}

#[tokio::test]
async fn completion_stream_deltas_concatenate_to_the_whole_answer() {
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0.8, "seed": 7}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24, "temperature": 0.8, "seed": 7}),
        ),
    ] {
        let (status, whole) = post(path, body.clone()).await;
        assert_eq!(status, 200, "{whole}");
        let mut sb = body.clone();
        sb["stream"] = json!(true);
        sb["stream_options"] = json!({"include_usage": true});
        let events = sse(path, sb).await;
        assert_eq!(events.last().unwrap(), "[DONE]");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap_or_else(|_| panic!("chunk parses: {e}")))
            .collect();
        let chat = path.contains("chat");
        let mut text = String::new();
        let mut finish = None;
        for c in &chunks {
            assert_eq!(c["id"], chunks[0]["id"]);
            assert_eq!(
                c["object"],
                if chat {
                    "chat.completion.chunk"
                } else {
                    "text_completion"
                }
            );
            for ch in c["choices"].as_array().unwrap() {
                let piece = if chat {
                    ch["delta"]["content"].as_str()
                } else {
                    ch["text"].as_str()
                };
                text.push_str(piece.unwrap_or(""));
                if !ch["finish_reason"].is_null() {
                    finish = Some(ch["finish_reason"].clone());
                }
            }
        }
        if chat {
            assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        }
        let usage = &chunks.last().unwrap()["usage"];
        assert_eq!(usage, &whole["usage"], "usage chunk");
        let want = if chat {
            &whole["choices"][0]["message"]["content"]
        } else {
            &whole["choices"][0]["text"]
        };
        assert_eq!(text, want.as_str().unwrap(), "{path}");
        assert_eq!(finish.as_ref(), Some(&whole["choices"][0]["finish_reason"]));
    }
}

#[tokio::test]
async fn n_choices_logprobs_and_usage() {
    let (status, r) = post(
        "/v1/completions",
        json!({"prompt": ["The sky is", "Water is"], "max_tokens": 6, "n": 2, "logprobs": 3, "temperature": 1.0, "seed": 1}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let choices = r["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["finish_reason"], "length");
        let lp = &c["logprobs"];
        assert_eq!(lp["tokens"].as_array().unwrap().len(), 6);
        assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 3);
        assert!(lp["token_logprobs"][0].as_f64().unwrap() <= 0.0);
    }
    // Prompt tokens once per prompt; completion tokens over all four choices.
    assert_eq!(r["usage"]["completion_tokens"], 24);
    assert_eq!(r["usage"]["prompt_tokens"], 3 + 2);
    assert_eq!(r["usage"]["total_tokens"], 29);
    assert!(r["system_fingerprint"].is_string());
}

#[tokio::test]
async fn errors_have_openai_shape_and_status() {
    let base = common::server();
    // Invalid fields: 400 naming the field.
    for (body, param) in [
        (json!({"prompt": "x", "temperature": 3.0}), "temperature"),
        (json!({"prompt": "x", "max_tokens": 0}), "max_tokens"),
        (json!({"prompt": "x", "max_tokens": 5000}), "max_tokens"),
        (json!({"prompt": "x", "n": 0}), "n"),
        (json!({"prompt": "x", "logprobs": 21}), "logprobs"),
        (
            json!({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}),
            "stop",
        ),
        (
            json!({"prompt": "x", "logit_bias": {"999999": 1}}),
            "logit_bias",
        ),
        (json!({"prompt": [999999]}), "prompt"),
        (json!({"prompt": "x", "max_tokens": "many"}), "max_tokens"),
    ] {
        let (status, r) = post("/v1/completions", body.clone()).await;
        assert_eq!(status, 400, "{body} -> {r}");
        assert_openai_error(&r, Some(param));
    }
    let (status, r) = post(
        "/v1/chat/completions",
        json!({"messages": [], "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 400);
    assert_openai_error(&r, Some("messages"));
    // Malformed JSON, even without a JSON content type.
    let resp = client()
        .post(format!("{base}/v1/completions"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_openai_error(&resp.json().await.unwrap(), None);
    // Unknown model and unknown route: 404.
    let (status, r) = post("/v1/completions", json!({"model": "gpt-9", "prompt": "x"})).await;
    assert_eq!(status, 404);
    assert_openai_error(&r, Some("model"));
    let resp = client()
        .get(format!("{base}/v1/models/gpt-9"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = client()
        .get(format!("{base}/v1/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_openai_error(&resp.json().await.unwrap(), None);
    // Body over the limit: 413.
    let big = "word ".repeat(20_000);
    let (status, r) = post("/v1/completions", json!({"prompt": big})).await;
    assert_eq!(status, 413);
    assert_openai_error(&r, None);
}

#[tokio::test]
async fn models_tokenize_and_detokenize() {
    let base = common::server();
    let models: Value = common::get_json(&format!("{base}/v1/models")).await;
    let id = models["data"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(id, "SmolLM2-135M-Instruct.Q4_1");
    let one: Value = common::get_json(&format!("{base}/v1/models/{id}")).await;
    assert_eq!(one["id"], id);
    assert_eq!(one["status"], "loaded");
    let bytes = std::fs::metadata(common::model_path()).unwrap().len();
    assert_eq!(one["size"], bytes);
    assert_eq!(one["capabilities"], json!(["completion", "chat", "tools"]));
    let (status, t) = post("/tokenize", json!({"prompt": "The capital of France is"})).await;
    assert_eq!(status, 200);
    assert_eq!(t["tokens"], json!([504, 3575, 282, 4649, 314]));
    assert_eq!(t["count"], 5);
    let (_, d) = post(
        "/detokenize",
        json!({"tokens": [504, 3575, 282, 4649, 314]}),
    )
    .await;
    assert_eq!(d["prompt"], "The capital of France is");
}

#[tokio::test]
async fn greedy_api_output_equals_sluice_generate() {
    // `sluice generate` and the API agree token for token on every reference prompt.
    let r = common::reference();
    let bin = env!("CARGO_BIN_EXE_sluice");
    let entries = r["raw"]
        .as_array()
        .unwrap()
        .iter()
        .chain(r["chat"].as_array().unwrap());
    for e in entries {
        let prompt = e["prompt"]
            .as_str()
            .or(e["chat_prompt_text"].as_str())
            .unwrap();
        let out = std::process::Command::new(bin)
            .args([
                "generate",
                "--prompt",
                prompt,
                "--max-tokens",
                "16",
                "--ids",
                "--ignore-eos",
            ])
            .env("SLUICE_MODEL", common::model_path())
            .output()
            .expect("sluice generate runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cli: Vec<u32> = String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        let (status, api) = post(
            "/v1/completions",
            json!({"prompt": prompt, "max_tokens": 16, "temperature": 0, "logprobs": 0, "ignore_eos": true}),
        )
        .await;
        assert_eq!(status, 200);
        let api_tokens: Vec<&str> = api["choices"][0]["logprobs"]["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(api_tokens.len(), 16);
        let mut cli_tokens = Vec::new();
        for id in &cli {
            let (_, d) = post("/detokenize", json!({"tokens": [id]})).await;
            cli_tokens.push(d["prompt"].as_str().unwrap().to_string());
        }
        assert_eq!(api_tokens, cli_tokens, "{prompt:?}");
    }
}

/// Requests the engine has ended because their client left (from `/metrics`).
async fn cancelled() -> u64 {
    common::metric(
        common::server(),
        "sluice_requests_total{",
        &["\"cancelled\""],
    )
    .await as u64
}

/// Waits until the engine has ended at least `n` cancelled requests in all.
async fn until_cancelled(n: u64) {
    let start = std::time::Instant::now();
    while cancelled().await < n {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the engine never freed the slots of the clients that left"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_client_that_disconnects_frees_its_slot() {
    let url = format!("{}/v1/completions", common::server());
    let before = cancelled().await;
    let body = json!({"prompt": "Tell me a long story.", "max_tokens": 500, "ignore_eos": true, "stream": true});
    for _ in 0..3 {
        let r = client().post(&url).json(&body).send().await.unwrap();
        let mut s = r.bytes_stream();
        s.next().await.expect("first chunk").unwrap();
        drop(s);
    }
    until_cancelled(before + 3).await;
    // A non-streaming client that gives up is cancelled too (500 tokens take seconds).
    let slow = client()
        .post(&url)
        .json(&json!({"prompt": "Tell me a long story.", "max_tokens": 500, "ignore_eos": true}))
        .timeout(std::time::Duration::from_millis(300))
        .send()
        .await;
    assert!(
        slow.is_err(),
        "the request should have timed out on the client side"
    );
    until_cancelled(before + 4).await;
}
