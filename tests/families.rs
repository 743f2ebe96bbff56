//! Every family sluice runs, on tiny random-weight models written by
//! `scripts/golden/tiny_models.py`, against llama.cpp's greedy runs on the same files
//! (`tests/data/tiny-models.json`): identical tokens on F32 files, close (the logprobs rule
//! of `tests/data/README.md`) on Q8_0 files. The files are written afresh by the pinned
//! gguf package and must hash to what llama.cpp ran.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use sluice::engine::{EngineConfig, EngineHandle, Event, LoadOptions, TokenEvent, ValidRequest};

/// A generated run: ids and, per step, the top-5 ids and the logprob gap between the
/// first two.
pub struct Run {
    ids: Vec<u32>,
    top: Vec<Vec<u32>>,
    gap: Vec<f64>,
}

/// Below this gap (nats) between llama.cpp's first two tokens, the order in which two
/// correct f32 implementations sum decides the pick: either token is accepted there.
const TIE: f64 = 1e-3;

fn golden() -> &'static Value {
    static G: OnceLock<Value> = OnceLock::new();
    G.get_or_init(|| {
        let p = common::data_dir().join("tiny-models.json");
        serde_json::from_str(&std::fs::read_to_string(p).expect("tiny-models.json")).unwrap()
    })
}

/// The directory of tiny models, written once per test binary.
pub fn models() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| common::golden_write("tiny_models.py", "tiny-models"))
}

fn llamacpp(name: &str) -> Vec<Run> {
    golden()["models"][name]["llamacpp"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| Run {
            ids: common::ids(&r["greedy_ids"]),
            top: r["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    s["top"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t[0].as_u64().unwrap() as u32)
                        .collect()
                })
                .collect(),
            gap: r["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let lp = |i: usize| s["top"][i][1].as_f64().unwrap_or(f64::NEG_INFINITY);
                    lp(0) - lp(1)
                })
                .collect(),
        })
        .collect()
}

/// Greedy runs of every golden prompt, all submitted at once (they share batches).
pub fn sluice_runs(path: &Path, options: &LoadOptions) -> Vec<Run> {
    let loaded = sluice::engine::load(path, options).unwrap_or_else(|e| panic!("{e}"));
    let prompts: Vec<Vec<u32>> = golden()["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(common::ids)
        .collect();
    let steps = golden()["steps"].as_u64().unwrap() as usize;
    let config = EngineConfig {
        slots: prompts.len(),
        context: 256,
        ..EngineConfig::default()
    };
    let end_ids = loaded.tokenizer.end_ids.clone();
    let engine = EngineHandle::start(loaded.model, Arc::new(loaded.tokenizer), config);
    let streams: Vec<_> = prompts
        .into_iter()
        .map(|p| {
            let mut r = ValidRequest::greedy(p, steps);
            r.logprobs = Some(5);
            r.stop_ids = end_ids.clone();
            engine.submit(r).expect("submits")
        })
        .collect();
    streams
        .into_iter()
        .map(|mut rx| {
            let mut out: Vec<TokenEvent> = Vec::new();
            loop {
                match rx.blocking_recv() {
                    Some(Event::Token(t)) => out.push(t),
                    Some(Event::Done(_)) => break,
                    other => panic!("generation failed: {other:?}"),
                }
            }
            Run {
                ids: out.iter().map(|t| t.id).collect(),
                top: out
                    .iter()
                    .map(|t| t.top.iter().map(|x| x.0).collect())
                    .collect(),
                gap: Vec::new(),
            }
        })
        .collect()
}

/// Identical until the first divergence, and there each side's token in the other's top 5.
fn close(a: &Run, b: &Run) -> bool {
    match a.ids.iter().zip(&b.ids).position(|(x, y)| x != y) {
        None => a.ids.len() == b.ids.len(),
        Some(n) => b.top[n].contains(&a.ids[n]) && a.top[n].contains(&b.ids[n]),
    }
}

/// Identical, except that where llama.cpp's (`b`) first two tokens tie within `TIE`,
/// `a` may pick the other one (and the runs are not compared past it).
fn identical(a: &Run, b: &Run) -> bool {
    match a.ids.iter().zip(&b.ids).position(|(x, y)| x != y) {
        None => a.ids.len() == b.ids.len(),
        Some(n) => b.gap[n] < TIE && b.top[n].get(1) == Some(&a.ids[n]),
    }
}

/// Compares sluice on `path` with llama.cpp's runs of model `name`.
pub fn check(name: &str, path: &Path, options: &LoadOptions, exact: bool) -> Result<(), String> {
    let want = llamacpp(name);
    let got = sluice_runs(path, options);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let ok = if exact { identical(g, w) } else { close(g, w) };
        if !ok {
            return Err(format!(
                "{name} prompt {i}: sluice {:?}\n  llama.cpp {:?}",
                g.ids, w.ids
            ));
        }
    }
    Ok(())
}

#[test]
fn every_family_matches_llama_cpp_on_tiny_models() {
    let models = golden()["models"].as_object().expect("models");
    let mut failures = Vec::new();
    for (name, m) in models {
        let path = models_dir_file(name);
        assert_eq!(
            common::sha256(&path),
            m["sha256"].as_str().unwrap(),
            "{name}: the written file differs from the one llama.cpp ran (gguf/numpy versions?)"
        );
        let exact = name.ends_with("-f32");
        if let Err(e) = check(name, &path, &LoadOptions::default(), exact) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn models_dir_file(name: &str) -> PathBuf {
    models().join(format!("{name}.gguf"))
}

#[test]
fn hugging_face_folders_match_the_same_weights_in_gguf() {
    use sluice::engine::Quantize;
    for family in ["qwen2", "gemma3"] {
        let dir = models().join(format!("hf-{family}"));
        // As stored (F32): llama.cpp's tokens on the F32 GGUF of the same weights.
        let none = LoadOptions {
            quantize: Quantize::None,
            ..LoadOptions::default()
        };
        check(&format!("{family}-f32"), &dir, &none, true).unwrap();
        // Quantised at load to Q8_0 (the default): close to llama.cpp on the Q8_0 GGUF.
        check(
            &format!("{family}-q8_0"),
            &dir,
            &LoadOptions::default(),
            false,
        )
        .unwrap();
        // 16-bit safetensors served as stored (F16 / BF16 kernels): close to the F32 runs.
        let half = models().join(match family {
            "qwen2" => "hf-qwen2-f16",
            _ => "hf-gemma3-bf16",
        });
        check(&format!("{family}-f32"), &half, &none, false).unwrap();
        // The folder's tokenizer and chat template are used.
        let loaded = sluice::engine::load(&dir, &LoadOptions::default()).unwrap();
        let tok = loaded.tokenizer;
        let text = tok
            .apply_chat_template(&[sluice::tokenizer::ChatMessage {
                role: "user".into(),
                content: "hi".into(),
                ..Default::default()
            }])
            .unwrap();
        assert_eq!(text, "<s>user: hi\n<s>assistant: ");
        let id = |t: &str| tok.id(t).unwrap();
        assert_eq!(
            tok.encode("<s>the").unwrap(),
            vec![1, id("t"), id("h"), id("e")]
        );
        assert!(tok.end_ids.contains(&2));
    }
}

#[test]
fn a_folder_that_cannot_be_served_is_refused_by_name() {
    let dir = common::scratch("families").join("bad-hf");
    let src = models().join("hf-qwen2");
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let p = f.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let config = dir.join("config.json");
    let orig = std::fs::read_to_string(&config).unwrap();
    let err = |c: &str| {
        std::fs::write(&config, c).unwrap();
        match sluice::engine::load(&dir, &LoadOptions::default()) {
            Ok(_) => panic!("{c} loads"),
            Err(e) => e.to_string(),
        }
    };
    let e = err(&orig.replace("\"qwen2\"", "\"mamba\""));
    assert!(e.contains("mamba"), "{e}");
    let e = err(&orig.replace(
        "\"rope_theta\"",
        "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}, \"rope_theta\"",
    ));
    assert!(e.contains("yarn"), "{e}");
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).unwrap();
    let e = err(&orig);
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_chat_template_file_replaces_the_models() {
    let dir = common::scratch("families").join("template");
    std::fs::create_dir_all(&dir).unwrap();
    let tmpl = dir.join("chat.jinja");
    std::fs::write(
        &tmpl,
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant]",
    )
    .unwrap();
    let options = LoadOptions {
        chat_template: Some(tmpl.clone()),
        ..LoadOptions::default()
    };
    // A GGUF without a template, and a folder with its own: the file wins in both.
    for model in [models_dir_file("llama-f32"), models().join("hf-qwen2")] {
        let loaded = sluice::engine::load(&model, &options).unwrap();
        let text = loaded
            .tokenizer
            .apply_chat_template(&[sluice::tokenizer::ChatMessage {
                role: "user".into(),
                content: "hi".into(),
                ..Default::default()
            }])
            .unwrap();
        assert_eq!(text, "[user] hi\n[assistant]");
    }
    // Without it, the GGUF has none: chat is refused with the reason.
    let loaded =
        sluice::engine::load(&models_dir_file("llama-f32"), &LoadOptions::default()).unwrap();
    assert!(loaded.tokenizer.chat_template.is_none());
    // A missing or unparsable file is a load error naming it.
    let missing = LoadOptions {
        chat_template: Some(dir.join("nope.jinja")),
        ..LoadOptions::default()
    };
    let e = sluice::engine::load(&models_dir_file("llama-f32"), &missing)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("nope.jinja"), "{e}");
    std::fs::write(&tmpl, "{% for m in messages %}").unwrap();
    let e = sluice::engine::load(&models_dir_file("llama-f32"), &options)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("chat template"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
