//! The model against `tests/data/smollm2-q4_1.json`: llama.cpp's tokenisation and chat
//! rendering, and greedy runs through the engine close to the independent f32 reference.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{data_dir, ids, load, reference};
use serde_json::{Value, json};
use sluice::engine::{EngineConfig, EngineHandle, Event, EventStream, TokenEvent, ValidRequest};
use sluice::tokenizer::{ChatMessage, IncrementalDecoder};
use sluice_kernels::Simd;

/// Every prompt of the reference file: (section, entry).
fn entries(r: &Value) -> Vec<(&'static str, &Value)> {
    let mut v = Vec::new();
    for sec in ["raw", "chat"] {
        for e in r[sec].as_array().expect("section") {
            v.push((sec, e));
        }
    }
    v
}

fn greedy(prompt: Vec<u32>, n: usize) -> ValidRequest {
    let mut r = ValidRequest::greedy(prompt, n);
    r.logprobs = Some(5);
    r
}

/// An engine on the default model with `slots` slots.
fn engine(slots: usize) -> EngineHandle {
    let loaded = load();
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

#[test]
fn tokenisation_and_chat_template_match_llama_cpp() {
    let tok = load().tokenizer;
    let r = reference();
    for (sec, e) in entries(&r) {
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
        assert_eq!(
            tok.decode(&got).expect("decodes"),
            text,
            "round trip of {text:?}"
        );
        // Incremental decoding: whole characters only, concatenating to the text.
        let mut dec = IncrementalDecoder::default();
        let mut streamed = String::new();
        for &id in &got {
            let delta = dec.push(&tok, id);
            assert!(
                !delta.contains('\u{FFFD}'),
                "partial character streamed for {text:?}"
            );
            streamed.push_str(&delta);
        }
        streamed.push_str(&dec.finish(&tok));
        assert_eq!(streamed, text, "incremental decode of {text:?}");
    }
}

#[test]
fn a_tokenizer_json_gives_the_same_ids() {
    let tok = load().tokenizer;
    let path = std::env::temp_dir().join(format!("sluice-tokenizer-{}.json", std::process::id()));
    std::fs::write(&path, tok.to_json().unwrap()).unwrap();
    let file = sluice::engine::GgufFile::open(&common::model_path()).unwrap();
    let from_json = sluice::tokenizer::Tokenizer::from_gguf(&file, Some(&path), None)
        .expect("tokenizer.json loads");
    let _ = std::fs::remove_file(&path);
    let r = reference();
    for (sec, e) in entries(&r) {
        if sec == "raw" {
            let text = e["prompt"].as_str().unwrap();
            assert_eq!(
                from_json.encode(text).unwrap(),
                ids(&e["tokens"]),
                "{text:?}"
            );
        }
    }
    assert_eq!(from_json.end_ids, tok.end_ids);
    let bad = std::env::temp_dir().join("sluice-no-such-tokenizer.json");
    assert!(sluice::tokenizer::Tokenizer::from_gguf(&file, Some(&bad), None).is_err());
}

#[test]
fn greedy_runs_are_close_to_the_reference_alone_and_batched() {
    println!("kernel level: {:?}", Simd::current());
    let r = reference();
    let jobs: Vec<(Vec<u32>, usize)> = entries(&r)
        .iter()
        .map(|(_, e)| {
            let n = e["reference"]["greedy_ids"].as_array().unwrap().len();
            (ids(&e["tokens"]), n)
        })
        .collect();

    // Alone: one request at a time through an engine with one slot.
    let one = engine(1);
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
    let path = std::env::temp_dir().join(format!("sluice-greedy-{}.json", std::process::id()));
    std::fs::write(&path, result.to_string()).unwrap();
    let tool = data_dir().join("logprobs_close.py");
    let golden = data_dir().join("smollm2-q4_1.json");
    for against in ["llamacpp", "reference"] {
        let out = Command::new("python3")
            .arg(&tool)
            .arg(&path)
            .arg(&golden)
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

    if std::env::var_os("SLUICE_REFERENCE_ALONE_ONLY").is_some() {
        return;
    }
    // Batched: all twenty prompts of different lengths submitted at once to an engine
    // with a slot each, so they share prefill and decode batches: the same tokens as alone.
    let all = engine(jobs.len());
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

/// The same greedy runs with every other kernel path forced (`SLUICE_KERNEL`), in a child
/// process of this test binary, since the level is fixed once per process.
#[test]
fn every_kernel_path_stays_close_to_the_reference() {
    if std::env::var_os("SLUICE_KERNEL").is_some() {
        return; // already a child
    }
    for level in [Simd::Avx2, Simd::Portable] {
        if level as u8 >= Simd::detected() as u8 {
            continue; // the parent run covers the detected level
        }
        let name = format!("{level:?}").to_lowercase();
        let out = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "greedy_runs_are_close_to_the_reference_alone_and_batched",
                "--nocapture",
            ])
            .env("SLUICE_KERNEL", &name)
            .env("SLUICE_REFERENCE_ALONE_ONLY", "1")
            .output()
            .expect("test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("--- SLUICE_KERNEL={name}\n{stdout}");
        assert!(out.status.success(), "{name}: {stdout}");
        assert!(
            stdout.contains(&format!("kernel level: {level:?}")),
            "{name} was not in force"
        );
        assert!(
            stdout.contains("20/20 close to reference"),
            "{name}: {stdout}"
        );
    }
}
