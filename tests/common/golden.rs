//! Checks against a golden file of `tests/data` (see its README): llama.cpp's tokenisation
//! and chat rendering, and greedy runs through the engine close to the independent f32
//! reference, alone and batched.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use serde_json::{Value, json};
use sluice::engine::{EngineConfig, EngineHandle, Event, EventStream, TokenEvent, ValidRequest};
use sluice::tokenizer::{ChatMessage, IncrementalDecoder, Tokenizer};
use sluice_kernels::Simd;

use super::{data_dir, ids};

/// Every prompt of a golden file: (section, entry).
pub fn entries(r: &Value) -> Vec<(&'static str, &Value)> {
    let mut v = Vec::new();
    for sec in ["raw", "chat"] {
        for e in r[sec].as_array().expect("section") {
            v.push((sec, e));
        }
    }
    v
}

/// The golden file `name` of `tests/data`.
pub fn read(name: &str) -> Value {
    let p = data_dir().join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).expect("golden json parses")
}

/// Token ids, chat rendering, decoding and incremental decoding of every prompt.
pub fn tokenisation_matches(tok: &Tokenizer, r: &Value) {
    for (sec, e) in entries(r) {
        let want = ids(&e["tokens"]);
        let text = if sec == "raw" {
            e["prompt"].as_str().expect("prompt").to_string()
        } else {
            let messages: Vec<ChatMessage> =
                serde_json::from_value(e["messages"].clone()).expect("messages");
            let rendered = tok
                .apply_chat_template(&messages)
                .expect("template renders");
            assert_eq!(
                rendered,
                e["chat_prompt_text"].as_str().unwrap(),
                "chat rendering"
            );
            rendered
        };
        let got = tok.encode(&text).expect("encodes");
        assert_eq!(got, want, "token ids of {text:?}");
        // A BOS the tokenizer added is not part of the text.
        let body = match (got.first(), tok.bos) {
            (Some(f), Some(b)) if *f == b && !text.starts_with(&tok.decode(&[b]).unwrap()) => {
                &got[1..]
            }
            _ => &got[..],
        };
        assert_eq!(
            tok.decode(body).expect("decodes"),
            text,
            "round trip of {text:?}"
        );
        // Incremental decoding: whole characters only, concatenating to the text.
        let mut dec = IncrementalDecoder::default();
        let mut streamed = String::new();
        for &id in body {
            let delta = dec.push(tok, id);
            assert!(
                !delta.contains('\u{FFFD}'),
                "partial character streamed for {text:?}"
            );
            streamed.push_str(&delta);
        }
        streamed.push_str(&dec.finish(tok));
        assert_eq!(streamed, text, "incremental decode of {text:?}");
    }
}

fn greedy(prompt: Vec<u32>, n: usize) -> ValidRequest {
    let mut r = ValidRequest::greedy(prompt, n);
    r.logprobs = Some(5);
    r
}

fn engine(model: &Path, slots: usize) -> EngineHandle {
    let loaded = sluice::load_model(model, &Default::default())
        .unwrap_or_else(|e| panic!("{e:#}: run `make test-data` first"));
    let config = EngineConfig {
        slots,
        context: 256,
        ..EngineConfig::default()
    };
    EngineHandle::start(loaded.model, Arc::new(loaded.tokenizer), config)
}

fn tokens(mut rx: EventStream) -> Vec<TokenEvent> {
    let mut out = Vec::new();
    loop {
        match rx.blocking_recv() {
            Some(Event::Token(t)) => out.push(t),
            Some(Event::Done(_)) => return out,
            other => panic!("generation failed: {other:?}"),
        }
    }
}

fn as_json(o: &[TokenEvent]) -> Value {
    let ids: Vec<u32> = o.iter().map(|t| t.id).collect();
    let steps: Vec<Value> = o
        .iter()
        .map(|s| json!({"id": s.id, "top": s.top}))
        .collect();
    json!({"greedy_ids": ids, "steps": steps})
}

/// Greedy runs of every prompt of `golden` (a file of `tests/data`) on `model`: close to
/// the reference alone (printing how close llama.cpp's own runs are), and the same tokens
/// when all prompts share batches (unless `alone_only`).
pub fn greedy_close(model: &Path, golden: &str, alone_only: bool) {
    println!(
        "kernel level: {:?}, avx2 vpdpbusd: {}",
        Simd::current(),
        sluice_kernels::avx2_vnni()
    );
    let r = read(golden);
    let jobs: Vec<(Vec<u32>, usize)> = entries(&r)
        .iter()
        .map(|(_, e)| {
            let n = e["reference"]["greedy_ids"].as_array().unwrap().len();
            (ids(&e["tokens"]), n)
        })
        .collect();

    // Alone: one request at a time through an engine with one slot.
    let one = engine(model, 1);
    let alone: Vec<Vec<TokenEvent>> = jobs
        .iter()
        .map(|(p, n)| tokens(one.submit(greedy(p.clone(), *n)).unwrap()))
        .collect();
    drop(one);

    let n_raw = r["raw"].as_array().unwrap().len();
    let result = json!({
        "raw": alone[..n_raw].iter().map(|o| as_json(o)).collect::<Vec<_>>(),
        "chat": alone[n_raw..].iter().map(|o| as_json(o)).collect::<Vec<_>>(),
    });
    let path = std::env::temp_dir().join(format!(
        "sluice-greedy-{golden}-{}.json",
        std::process::id()
    ));
    std::fs::write(&path, result.to_string()).unwrap();
    let tool = data_dir().join("logprobs_close.py");
    for against in ["llamacpp", "reference"] {
        let out = Command::new("python3")
            .arg(&tool)
            .arg(&path)
            .arg(data_dir().join(golden))
            .args(["--against", against])
            .output()
            .expect("python3 runs");
        println!(
            "--- against {against}\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        if against == "reference" {
            assert!(
                out.status.success(),
                "not close to the reference on every prompt"
            );
        }
    }
    let _ = std::fs::remove_file(&path);
    if alone_only {
        return;
    }
    // Batched: all prompts of different lengths submitted at once to an engine with a
    // slot each, so they share prefill and decode batches: the same tokens as alone.
    let all = engine(model, jobs.len());
    let streams: Vec<EventStream> = jobs
        .iter()
        .map(|(p, n)| all.submit(greedy(p.clone(), *n)).unwrap())
        .collect();
    for (i, (a, rx)) in alone.iter().zip(streams).enumerate() {
        let b = tokens(rx);
        let ids = |o: &[TokenEvent]| o.iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(a), ids(&b), "prompt {i}: batched differs from alone");
    }
}
