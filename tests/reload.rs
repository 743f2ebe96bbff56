//! `POST /admin/reload` against a real server with the real model: checkpoints written here
//! from the default one (same shapes, some tensors scaled or requantised), every refusal,
//! the three modes, 16 streams through 20 reloads, and the KV slab left in place.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use common::{engine, model_path, server_with};
use futures::StreamExt;
use serde_json::{Value, json};

const TOKEN: &str = "test-admin-token";
const PROMPT: &str = "The history of the river town begins";

fn dir() -> PathBuf {
    let d = common::scratch("reload").join("models");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Copies the default model to `dst`, passing every tensor through `edit`.
fn rewrite(dst: &Path, edit: impl Fn(&str, QTensor) -> QTensor) {
    let mut r = std::fs::File::open(model_path()).unwrap();
    let content = gguf_file::Content::read(&mut r).unwrap();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tensors: Vec<(String, QTensor)> = names
        .iter()
        .map(|n| {
            let t = content.tensor(&mut r, n, &Device::Cpu).unwrap();
            (n.to_string(), edit(n, t))
        })
        .collect();
    let meta: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut f = std::fs::File::create(dst).unwrap();
    gguf_file::write(&mut f, &meta, &tensors).unwrap();
}

fn scaled(t: QTensor, by: f32) -> QTensor {
    let x = t.dequantize(&Device::Cpu).unwrap();
    QTensor::quantize(&(x * by as f64).unwrap(), t.dtype()).unwrap()
}

/// A second valid checkpoint: every FFN norm scaled by 1.8 (same names, shapes, types).
fn variant() -> PathBuf {
    let p = dir().join("variant.gguf");
    if !p.exists() {
        rewrite(&p, |n, t| {
            if n.ends_with("ffn_norm.weight") {
                scaled(t, 1.8)
            } else {
                t
            }
        });
    }
    p
}

fn url() -> &'static str {
    server_with(|c| {
        c.admin_token = Some(TOKEN.into());
        c.reload_dirs = vec![dir(), model_path().parent().unwrap().to_path_buf()];
        c.slots = 16;
        // Room for streams that outlast a reload's load (below).
        c.context = Some(2048);
    })
}

async fn admin(path: &str, body: Option<Value>, token: Option<&str>) -> (u16, Value) {
    let c = reqwest::Client::new();
    let mut r = match &body {
        Some(b) => c.post(format!("{}{path}", url())).json(b),
        None => c.get(format!("{}{path}", url())),
    };
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn reload(path: &Path, mode: &str, version: &str) -> (u16, Value) {
    let body = json!({"path": path, "mode": mode, "version": version});
    admin("/admin/reload", Some(body), Some(TOKEN)).await
}

/// The served model id.
async fn model() -> String {
    let v = common::get_json(&format!("{}/v1/models", url())).await;
    v["data"][0]["id"].as_str().unwrap().to_string()
}

/// Greedy completion: (text, system_fingerprint).
async fn greedy(max_tokens: usize) -> (String, String) {
    let body = json!({"model": model().await, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0});
    let v = common::post_json(&format!("{}/v1/completions", url()), &body).await;
    (
        v["choices"][0]["text"].as_str().expect("text").to_string(),
        v["system_fingerprint"].as_str().unwrap().to_string(),
    )
}

/// A streaming completion that has started: returns once its first token has arrived
/// (the request is running in the engine); the task then yields Ok((text, fingerprint))
/// when the stream ends with [DONE] and no error chunk.
async fn started(
    max_tokens: usize,
    temperature: f64,
) -> tokio::task::JoinHandle<Result<(String, String), String>> {
    // No end token: the request runs its whole length, so it is in flight for as long as
    // the test needs.
    let body = json!({"model": model().await, "prompt": PROMPT, "max_tokens": max_tokens,
                      "temperature": temperature, "ignore_eos": true, "stream": true});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/completions", url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let mut s = resp.bytes_stream();
    let mut body = String::from_utf8_lossy(&s.next().await.unwrap().unwrap()).into_owned();
    tokio::spawn(async move {
        while let Some(chunk) = s.next().await {
            body.push_str(&String::from_utf8_lossy(&chunk.map_err(|e| e.to_string())?));
        }
        let (mut text, mut fingerprint) = (String::new(), String::new());
        for v in common::sse::finished(&body)? {
            text.push_str(v["choices"][0]["text"].as_str().unwrap_or(""));
            fingerprint = v["system_fingerprint"].as_str().unwrap_or("").to_string();
        }
        Ok((text, fingerprint))
    })
}

/// Waits until `GET /admin/weights` says a reload is in progress.
async fn until_reloading() {
    for _ in 0..3000 {
        let (_, w) = admin("/admin/weights", None, Some(TOKEN)).await;
        if w["reloading"] == true {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the reload never started");
}

/// A streaming completion: Ok(text) when it ends with [DONE] and no error chunk.
async fn stream(max_tokens: usize) -> Result<String, String> {
    let body = json!({"model": model().await, "prompt": PROMPT, "max_tokens": max_tokens,
                      "temperature": 0.7, "stream": true});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/completions", url()))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status()));
    }
    let body = common::sse::body(resp).await?;
    let chunks = common::sse::finished(&body)?;
    Ok(chunks
        .iter()
        .map(|v| v["choices"][0]["text"].as_str().unwrap_or(""))
        .collect())
}

/// What a fresh engine on `path` answers greedily, in process.
fn fresh(path: &Path, max_tokens: usize) -> String {
    use sluice::engine::{EngineConfig, EngineHandle, Event, ValidRequest};
    let loaded = sluice::load_model(path, &Default::default()).unwrap();
    let tok = std::sync::Arc::new(loaded.tokenizer);
    let config = EngineConfig {
        slots: 1,
        context: 256,
        ..EngineConfig::default()
    };
    let engine = EngineHandle::start(loaded.model, tok.clone(), config);
    let mut req = ValidRequest::greedy(tok.encode(PROMPT).unwrap(), max_tokens);
    req.stop_ids = tok.end_ids.clone();
    let mut rx = engine.submit(req).unwrap();
    let mut ids = Vec::new();
    loop {
        match rx.blocking_recv() {
            Some(Event::Token(t)) => ids.push(t.id),
            Some(Event::Done(_)) => break,
            other => panic!("{other:?}"),
        }
    }
    tok.decode(&ids).unwrap()
}

fn refusal(status: u16, body: &Value, want: u16, needle: &str) {
    assert_eq!(status, want, "{body}");
    let msg = body["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
    assert!(body["error"]["type"].is_string(), "OpenAI-shaped: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reloads_swap_weights_without_losing_anything() {
    let base = model_path().canonicalize().unwrap();
    let var = variant();

    // Auth: no token, wrong token.
    let (s, b) = admin("/admin/weights", None, None).await;
    refusal(s, &b, 401, "admin token");
    let (s, b) = admin("/admin/reload", Some(json!({"path": var})), Some("wrong")).await;
    refusal(s, &b, 401, "admin token");
    let (s, w) = admin("/admin/weights", None, Some(TOKEN)).await;
    assert_eq!(s, 200);
    assert_eq!(w["current"]["version"], "v1");
    let (sha, size) = sluice::engine::checkpoint::digest(&base).unwrap();
    assert_eq!(w["current"]["sha256"], sha.as_str());
    assert_eq!(w["current"]["size_bytes"], size);
    assert!(w["previous"].is_null());

    let (old, fp) = greedy(24).await;
    assert_eq!(fp, "v1");
    let kv_before = engine().kv_base();
    assert_ne!(kv_before, 0, "the engine reports its slab");

    // Refusals, each leaving the old weights answering identically.
    let d = dir();
    std::fs::write(d.join("notes.gguf"), b"not a gguf file at all").unwrap();
    // Beside the models directory `dir()` (which the admin API is confined to).
    let outside = common::scratch("reload").join("outside.gguf");
    std::fs::copy(&var, &outside).unwrap();
    let link = d.join("link.gguf");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let gemma = d.join("gemma3.gguf");
    {
        let a = gguf_file::Value::String("gemma3".into());
        let t = QTensor::quantize(
            &Tensor::zeros((64, 32), candle_core::DType::F32, &Device::Cpu).unwrap(),
            GgmlDType::F32,
        )
        .unwrap();
        let mut f = std::fs::File::create(&gemma).unwrap();
        gguf_file::write(
            &mut f,
            &[("general.architecture", &a)],
            &[("token_embd.weight", &t)],
        )
        .unwrap();
    }
    let requant = d.join("requant.gguf");
    rewrite(&requant, |n, t| {
        if n == "blk.0.attn_q.weight" {
            QTensor::quantize(&t.dequantize(&Device::Cpu).unwrap(), GgmlDType::Q8_0).unwrap()
        } else {
            t
        }
    });
    let cases: Vec<(PathBuf, u16, &str)> = vec![
        (d.join("missing.gguf"), 404, "missing.gguf"),
        (outside.clone(), 403, "outside the model directories"),
        (
            d.join("..").join(outside.file_name().unwrap()),
            403,
            "outside",
        ),
        (link.clone(), 403, "outside"),
        (d.join("notes.gguf"), 422, "not a readable GGUF"),
        (gemma.clone(), 422, "gemma3"),
        (requant.clone(), 422, "blk.0.attn_q.weight"),
    ];
    for (path, want, needle) in cases {
        let (s, b) = reload(&path, "wait", "bad").await;
        refusal(s, &b, want, needle);
        assert_eq!(
            greedy(24).await,
            (old.clone(), "v1".into()),
            "after refusing {}",
            path.display()
        );
    }
    let (s, b) = admin(
        "/admin/reload",
        Some(json!({"path": var, "mode": "sideways"})),
        Some(TOKEN),
    )
    .await;
    refusal(s, &b, 400, "sideways");

    // keep: streams in flight (each has its first token) finish without error on the new
    // weights.
    let mut streams = Vec::new();
    for _ in 0..4 {
        streams.push(started(64, 0.7).await);
    }
    let (s, r) = reload(&var, "keep", "v2").await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["previous_version"], "v1");
    for h in streams {
        h.await.unwrap().expect("keep-mode stream completes");
    }
    let (new, fp) = greedy(24).await;
    assert_eq!(fp, "v2");
    assert_ne!(new, old, "the scaled checkpoint answers differently");
    let v = var.clone();
    let fresh_new = tokio::task::spawn_blocking(move || fresh(&v, 24))
        .await
        .unwrap();
    assert_eq!(new, fresh_new, "same as a fresh server on the new file");

    // wait: requests in flight (each has its first token) all finish with old-weights
    // output, then the swap; meanwhile another reload is refused. They must still be
    // running when the new weights are loaded (about a second on 2 cores, competing with
    // them), or the engine never holds the swap: 200 tokens each once sufficed, but no
    // longer does with faster decode.
    let body = json!({"model": model().await, "prompt": PROMPT, "max_tokens": 1000,
                      "temperature": 0, "ignore_eos": true});
    let v = common::post_json(&format!("{}/v1/completions", url()), &body).await;
    let long_new = v["choices"][0]["text"].as_str().unwrap().to_string();
    let mut pending = Vec::new();
    for _ in 0..4 {
        pending.push(started(1000, 0.0).await);
    }
    let b = base.clone();
    let busy = tokio::spawn(async move { reload(&b, "wait", "v3").await });
    until_reloading().await;
    let (s, b) = reload(&var, "keep", "v4").await;
    refusal(s, &b, 409, "in progress");
    // A request that arrives once the engine holds the new weights waits for the swap, and
    // is answered by, and names, them: streamed chunks and a whole answer alike.
    let mut held = false;
    for _ in 0..3000 {
        let (_, w) = admin("/admin/weights", None, Some(TOKEN)).await;
        if w["swap_pending"] == true {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(held, "the engine never held the swap");
    let queued_stream = started(24, 0.0).await;
    let queued_whole = tokio::spawn(greedy(24));
    for h in pending {
        assert_eq!(
            h.await.unwrap(),
            Ok((long_new.clone(), "v2".into())),
            "wait mode mixed weights"
        );
    }
    let (s, r) = busy.await.unwrap();
    assert_eq!(s, 200, "{r}");
    assert_eq!(queued_stream.await.unwrap().expect("queued stream").1, "v3");
    assert_eq!(queued_whole.await.unwrap(), (old.clone(), "v3".into()));
    assert_eq!(greedy(24).await, (old.clone(), "v3".into()));

    // abort: a running stream ends with an error chunk. Long enough to be running still
    // when the new weights are ready: loading them takes about a second on 2 cores, and
    // 400 tokens (once enough) can now finish first.
    let victim = started(1900, 0.7).await;
    let (s, r) = reload(&var, "abort", "v5").await;
    assert_eq!(s, 200, "{r}");
    assert!(r["aborted"].as_u64().unwrap() >= 1, "{r}");
    let err = victim
        .await
        .unwrap()
        .expect_err("aborted stream reports an error");
    assert!(err.contains("reloaded"), "{err}");

    // An admin client that leaves mid-reload changes nothing: the swap still happens, the
    // record follows it, and a reload sent meanwhile is refused with 409.
    let holder = started(400, 0.0).await;
    let b = base.clone();
    let gone = tokio::spawn(async move { reload(&b, "wait", "v6").await });
    until_reloading().await;
    gone.abort();
    let (s, b) = reload(&var, "keep", "v7").await;
    refusal(s, &b, 409, "in progress");
    let (_, fp) = holder.await.unwrap().expect("the running request finishes");
    assert_eq!(fp, "v5", "it ran on the weights it started on");
    let mut settled = false;
    for _ in 0..3000 {
        let (_, w) = admin("/admin/weights", None, Some(TOKEN)).await;
        if w["reloading"] == false {
            assert_eq!(w["current"]["version"], "v6", "{w}");
            assert_eq!(w["previous"]["version"], "v5", "{w}");
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(settled, "the abandoned reload never finished");
    assert_eq!(greedy(24).await, (old.clone(), "v6".into()));

    // 16 streams through 20 reloads: no request fails.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let stop = stop.clone();
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    match stream(24).await {
                        Ok(_) => ok += 1,
                        Err(e) => failed.push(e),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let mut pauses = Vec::new();
    for i in 0..20 {
        let (path, mode) = if i % 2 == 0 {
            (&base, "keep")
        } else {
            (&var, "wait")
        };
        let (s, r) = reload(path, mode, &format!("r{i}")).await;
        assert_eq!(s, 200, "{r}");
        pauses.push(r["pause_ms"].as_f64().unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut served = 0;
    for c in clients {
        let (ok, failed) = c.await.unwrap();
        assert!(failed.is_empty(), "failed during reloads: {failed:?}");
        served += ok;
    }
    pauses.sort_by(f64::total_cmp);
    println!(
        "20 reloads under 16 streams: {served} requests served, swap pause p50 {:.3} ms, max {:.3} ms",
        pauses[pauses.len() / 2],
        pauses[pauses.len() - 1]
    );

    // The slab was never reallocated; the record and metrics follow.
    assert_eq!(engine().kv_base(), kv_before);
    let (_, w) = admin("/admin/weights", None, Some(TOKEN)).await;
    assert_eq!(w["current"]["version"], "r19");
    assert_eq!(w["previous"]["version"], "r18");
    let metrics = reqwest::get(format!("{}/metrics", url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (outcome, n) in [("success", 24), ("refused", 7), ("conflict", 2)] {
        let line = format!("sluice_weight_reloads_total{{outcome=\"{outcome}\"}} {n}");
        assert!(
            metrics.lines().any(|l| common::without_model(l) == line),
            "{line} missing"
        );
    }
    assert!(
        metrics
            .lines()
            .any(|l| common::without_model(l) == "sluice_weights_version 25"),
        "weights version gauge"
    );
    let _ = std::fs::remove_file(&outside);
}
