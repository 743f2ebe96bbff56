//! Several models in one server: each answers as its own server does, requests are routed
//! by `model`, models load on demand, the least recently used idle one is unloaded for
//! another, a busy one is not, an idle one is unloaded after `--model-idle-unload`, and a
//! file that does not load is listed as failed and answered with its error while the
//! others keep serving. Every server here is a real `sluice serve` process.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Spawned;
use serde_json::{Value, json};

/// The tiny random-weight Qwen3 converted by llama.cpp's converter (tests/data/converted).
fn tiny(name: &str) -> PathBuf {
    common::data_dir()
        .join("converted")
        .join(format!("{name}.gguf"))
}

fn model_arg(id: &str, path: &Path) -> String {
    format!("{id}={}", path.display())
}

/// A directory of models: two tiny models and a file that is not a model (the default
/// model is given as `--model smol=PATH` beside it). Each test has its own (`name`): the
/// tests run at once, and one's directory must not be remade under another's server.
fn models_dir(name: &str) -> PathBuf {
    let dir = common::scratch("models").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let link = |from: &Path, to: &str| std::os::unix::fs::symlink(from, dir.join(to)).unwrap();
    link(&tiny("qwen3"), "qwen3.gguf");
    link(&tiny("llama"), "llama.gguf");
    std::fs::write(dir.join("broken.gguf"), b"GGUF not really a model").unwrap();
    // Neither a GGUF file nor a Hugging Face folder: not offered.
    std::fs::write(dir.join("notes.txt"), b"hello").unwrap();
    dir
}

const SMALL: &[&str] = &["--slots", "4", "--context", "512"];

/// `--model smol=<the default model> --models-dir DIR`.
fn with_dir(dir: &Path) -> Vec<String> {
    vec![
        "--model".into(),
        model_arg("smol", &common::model_path()),
        "--models-dir".into(),
        dir.display().to_string(),
    ]
}

async fn serve_dir(dir: &Path, extra: &[&str]) -> Spawned {
    let mut args: Vec<&str> = Vec::new();
    let d = with_dir(dir);
    args.extend(d.iter().map(String::as_str));
    args.extend_from_slice(extra);
    serve(&args).await
}

async fn serve(extra: &[&str]) -> Spawned {
    let mut args = vec!["serve"];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    Spawned::ready(&args, &[]).await
}

async fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.expect("a JSON body"))
}

/// A greedy and a seeded sampled completion with logprobs, as (text, logprobs) each.
async fn answers(base: &str, model: Option<&str>) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (temperature, seed) in [(0.0, 0), (0.9, 17)] {
        let mut body = json!({
            "prompt": "The three primary colours are",
            "max_tokens": 12,
            "temperature": temperature,
            "seed": seed,
            "logprobs": 2,
        });
        if let Some(m) = model {
            body["model"] = json!(m);
        }
        let (status, v) = post(base, "/v1/completions", &body).await;
        assert_eq!(status, 200, "{v}");
        if let Some(m) = model {
            assert_eq!(v["model"], m);
        }
        let choice = &v["choices"][0];
        out.push((
            choice["text"].as_str().unwrap().to_string(),
            choice["logprobs"].clone(),
        ));
    }
    out
}

/// Each model's answers from a server of its own.
async fn alone(path: &Path) -> Vec<(String, Value)> {
    let server = serve(&["--model", &path.display().to_string()]).await;
    answers(&server.base, None).await
}

async fn statuses(base: &str) -> Vec<(String, String)> {
    let list = common::get_json(&format!("{base}/v1/models")).await;
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn status_of(base: &str, id: &str) -> String {
    statuses(base)
        .await
        .into_iter()
        .find(|(m, _)| m == id)
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("{id} is not listed"))
}

#[tokio::test]
async fn two_models_answer_as_their_own_servers() {
    let (smol, qwen) = (common::model_path(), tiny("qwen3"));
    let expected_smol = alone(&smol).await;
    let expected_qwen = alone(&qwen).await;
    assert_ne!(expected_smol, expected_qwen);
    let server = serve(&[
        "--model",
        &model_arg("smol", &smol),
        "--model",
        &model_arg("qwen", &qwen),
        "--admin-token",
        "secret",
    ])
    .await;
    let base = &server.base;
    assert_eq!(
        statuses(base).await,
        [
            ("smol".into(), "loaded".into()),
            ("qwen".into(), "loaded".into())
        ]
    );
    // Interleaved, by name, and the default model for a request that names none.
    assert_eq!(answers(base, Some("qwen")).await, expected_qwen);
    assert_eq!(answers(base, Some("smol")).await, expected_smol);
    assert_eq!(answers(base, None).await, expected_smol);
    assert_eq!(answers(base, Some("qwen")).await, expected_qwen);
    // Each model's own card: its context, capabilities.
    let card = common::get_json(&format!("{base}/v1/models/qwen")).await;
    assert_eq!(card["status"], "loaded");
    assert!(card["max_model_len"].as_u64().unwrap() > 0);
    assert!(
        card["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("completion"))
    );
    // Tokenising routes too: the two vocabularies differ.
    let tokens = |m: &str| {
        let body = json!({"model": m, "prompt": "The three primary colours are"});
        async move { post(base, "/tokenize", &body).await.1["tokens"].clone() }
    };
    assert_ne!(tokens("smol").await, tokens("qwen").await);
    // Request metrics carry the model: two requests per answers() call.
    let finished = |m: &'static str| async move {
        let label = format!("model=\"{m}\"");
        common::metric(base, "sluice_requests_total", &[&label]).await
    };
    assert_eq!(finished("smol").await, 4.0);
    assert_eq!(finished("qwen").await, 4.0);
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "sluice_kv_blocks_capacity",
        "sluice_time_to_first_token_seconds_count",
    ] {
        for m in ["smol", "qwen"] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(name) && l.contains(&format!("model=\"{m}\""))),
                "no {name} for {m}"
            );
        }
    }
    assert_eq!(text.matches("# TYPE sluice_requests_total ").count(), 1);
    // The admin API describes each model's weights.
    let weights = reqwest::Client::new()
        .get(format!("{base}/admin/weights?model=qwen"))
        .bearer_auth("secret")
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(weights["model"], "qwen");
    assert_eq!(weights["current"]["version"], "v1");
}

#[tokio::test]
async fn an_unknown_model_is_404_on_every_api() {
    let server = serve(&[]).await;
    let base = &server.base;
    let openai = [
        ("/v1/completions", json!({"prompt": "Hi", "max_tokens": 1})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}),
        ),
        (
            "/v1/responses",
            json!({"input": "Hi", "max_output_tokens": 16}),
        ),
        ("/v1/embeddings", json!({"input": "Hi"})),
        ("/v1/rerank", json!({"query": "Hi", "documents": ["a"]})),
        ("/tokenize", json!({"prompt": "Hi"})),
        ("/detokenize", json!({"tokens": [1]})),
    ];
    for (path, mut body) in openai {
        body["model"] = json!("no-such-model");
        let (status, v) = post(base, path, &body).await;
        assert_eq!(status, 404, "{path}: {v}");
        assert_eq!(v["error"]["code"], "model_not_found", "{path}");
        assert_eq!(v["error"]["param"], "model", "{path}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{path}");
    }
    // Anthropic's shape on its routes.
    let body = json!({"model": "no-such-model", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]});
    let (status, v) = post(base, "/v1/messages", &body).await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "not_found_error");
    let r = reqwest::get(format!("{base}/v1/models/no-such-model"))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = reqwest::get(format!("{base}/tokenizer_info?model=no-such-model"))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn one_loaded_model_at_a_time_answers_as_each_alone() {
    let dir = models_dir("alternating");
    let (smol, qwen) = (common::model_path(), tiny("qwen3"));
    let expected_smol = alone(&smol).await;
    let expected_qwen = alone(&qwen).await;
    let server = serve_dir(&dir, &["--max-loaded-models", "1"]).await;
    let base = &server.base;
    // The default model first, loaded at start; the directory's by name, on demand.
    assert_eq!(
        statuses(base).await,
        [
            ("smol".into(), "loaded".into()),
            ("broken".into(), "unloaded".into()),
            ("llama".into(), "unloaded".into()),
            ("qwen3".into(), "unloaded".into()),
        ]
    );
    for round in 0..2 {
        assert_eq!(
            answers(base, Some("smol")).await,
            expected_smol,
            "round {round}"
        );
        assert_eq!(status_of(base, "smol").await, "loaded");
        assert_eq!(
            answers(base, Some("qwen3")).await,
            expected_qwen,
            "round {round}"
        );
        assert_eq!(status_of(base, "qwen3").await, "loaded");
        assert_eq!(status_of(base, "smol").await, "unloaded");
    }
    // A file that does not load: its error, the same every time, and listed as failed;
    // the other models keep serving.
    let body = json!({"model": "broken", "prompt": "Hi", "max_tokens": 1});
    let (status, first) = post(base, "/v1/completions", &body).await;
    assert_eq!(status, 500, "{first}");
    assert_eq!(first["error"]["code"], "model_load_failed");
    assert_eq!(first["error"]["param"], "model");
    let message = first["error"]["message"].as_str().unwrap();
    assert!(message.contains("`broken`"), "{message}");
    let (status, again) = post(base, "/v1/completions", &body).await;
    assert_eq!(status, 500);
    assert_eq!(again, first);
    let card = common::get_json(&format!("{base}/v1/models/broken")).await;
    assert_eq!(card["status"], "failed");
    assert!(!card["error"].as_str().unwrap().is_empty());
    assert_eq!(answers(base, Some("smol")).await, expected_smol);
    // The listing shows capabilities learnt while loaded, after unloading too.
    assert_eq!(answers(base, Some("llama")).await.len(), 2);
    let card = common::get_json(&format!("{base}/v1/models/smol")).await;
    assert_eq!(card["status"], "unloaded");
    assert!(
        card["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("chat"))
    );
    assert_eq!(card["max_model_len"], 512);
}

/// Reads a streamed completion to its end: (text, finish reason, chunks).
async fn read_stream(resp: reqwest::Response) -> (String, String, usize) {
    let raw = common::sse::body(resp).await.unwrap();
    let (values, done) = common::sse::chunks(&raw);
    assert!(done, "the stream ended without [DONE]: {raw}");
    let (mut text, mut finish) = (String::new(), String::new());
    for v in &values {
        assert!(v.get("error").is_none(), "{v}");
        text.push_str(v["choices"][0]["text"].as_str().unwrap_or(""));
        if let Some(f) = v["choices"][0]["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (text, finish, values.len())
}

/// A long greedy stream of the default model, started: the response, once its first
/// chunk... is on its way (the headers are back, so the request is running).
async fn long_stream(base: &str, model: &str) -> reqwest::Response {
    let body = json!({
        "model": model,
        "prompt": "Write a long story about a lighthouse keeper.",
        "max_tokens": 300,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
    });
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r
}

async fn whole(base: &str, model: &str) -> String {
    let body = json!({
        "model": model,
        "prompt": "Write a long story about a lighthouse keeper.",
        "max_tokens": 300,
        "temperature": 0,
        "ignore_eos": true,
    });
    let (status, v) = post(base, "/v1/completions", &body).await;
    assert_eq!(status, 200, "{v}");
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_busy_model_is_not_unloaded_and_streams_finish() {
    let dir = models_dir("busy");
    // Two loaded at most: smol streams, qwen3 is loaded and idle; asking for llama
    // unloads qwen3, never the busy smol.
    let server = serve_dir(&dir, &["--max-loaded-models", "2"]).await;
    let base = &server.base;
    let expected = whole(base, "smol").await;
    answers(base, Some("qwen3")).await;
    assert_eq!(status_of(base, "qwen3").await, "loaded");
    let stream = long_stream(base, "smol").await;
    let reader = tokio::spawn(read_stream(stream));
    assert_eq!(answers(base, Some("llama")).await.len(), 2);
    assert_eq!(status_of(base, "qwen3").await, "unloaded");
    assert_eq!(status_of(base, "llama").await, "loaded");
    let (text, finish, chunks) = reader.await.unwrap();
    assert_eq!(
        (finish.as_str(), text.as_str()),
        ("length", expected.as_str())
    );
    assert!(chunks >= 2);
    drop(server);

    // One loaded at most: a request for another model waits for smol's stream to end,
    // which ends whole, then loads its model and is answered.
    let server = serve_dir(&dir, &["--max-loaded-models", "1"]).await;
    let base = &server.base;
    let expected_qwen = answers(base, Some("qwen3")).await;
    let stream = long_stream(base, "smol").await;
    let reader = tokio::spawn(read_stream(stream));
    assert_eq!(answers(base, Some("qwen3")).await, expected_qwen);
    let (text, finish, _) = reader.await.unwrap();
    assert_eq!(
        (finish.as_str(), text.as_str()),
        ("length", expected.as_str())
    );
    assert_eq!(status_of(base, "smol").await, "unloaded");
}

#[tokio::test]
async fn an_idle_model_is_unloaded_and_loads_again() {
    let dir = models_dir("idle");
    let server = serve_dir(&dir, &["--model-idle-unload", "1"]).await;
    let base = &server.base;
    let first = answers(base, Some("qwen3")).await;
    // Unloaded within a few seconds of its last request (checked once a second).
    let mut unloaded = false;
    for _ in 0..100 {
        if status_of(base, "qwen3").await == "unloaded" {
            unloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(unloaded, "qwen3 stayed loaded: {:?}", statuses(base).await);
    assert_eq!(answers(base, Some("qwen3")).await, first);
    // Readiness stays: the default model loads again on demand.
    let r = reqwest::get(format!("{base}/ready")).await.unwrap();
    assert_eq!(r.status(), 200);
}

#[test]
fn model_flags_are_checked_at_start() {
    let qwen = tiny("qwen3");
    let dup = model_arg("same", &qwen);
    let (ok, _, err) = common::run_sluice(&["serve", "--model", &dup, "--model", &dup], &[]);
    assert!(!ok);
    assert!(err.contains("two models are named `same`"), "{err}");
    let empty = common::scratch("models").join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (ok, _, err) = common::run_sluice(
        &["serve", "--models-dir", &empty.display().to_string()],
        &[("SLUICE_MODEL", "")],
    );
    assert!(!ok);
    assert!(err.contains("--models-dir"), "{err}");
}
