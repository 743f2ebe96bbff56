//! Files sluice cannot run are refused with an error that names what was found, by the
//! loader, and by `sluice serve` and `sluice generate` alike (exit non-zero, same reason).

use std::path::PathBuf;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use sluice::engine::ModelError;

mod common;

fn tmp(name: &str) -> PathBuf {
    common::scratch("load-errors").join(name)
}

fn write(path: &std::path::Path, arch: &str, tensors: &[(&str, QTensor)]) {
    write_heads(path, arch, 1, tensors)
}

fn write_heads(path: &std::path::Path, arch: &str, n_heads: u32, tensors: &[(&str, QTensor)]) {
    let a = Value::String(arch.into());
    let u = |x: u32| Value::U32(x);
    let (blocks, dim, heads, ffn) = (u(1), u(32), u(n_heads), u(32));
    let meta: Vec<(String, &Value)> = vec![
        ("general.architecture".into(), &a),
        (format!("{arch}.block_count"), &blocks),
        (format!("{arch}.embedding_length"), &dim),
        (format!("{arch}.attention.head_count"), &heads),
        (format!("{arch}.feed_forward_length"), &ffn),
    ];
    let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &meta, &tensors).unwrap();
}

fn tensor(shape: &[usize], dtype: GgmlDType) -> QTensor {
    let n: usize = shape.iter().product();
    let t = Tensor::from_vec(
        (0..n).map(|i| (i % 7) as f32 / 7.0).collect::<Vec<f32>>(),
        shape,
        &Device::Cpu,
    )
    .unwrap();
    QTensor::quantize(&t, dtype).unwrap()
}

fn load(path: &std::path::Path) -> Result<(), ModelError> {
    sluice::engine::load(path, &Default::default()).map(|_| ())
}

fn err(path: &std::path::Path) -> String {
    match load(path) {
        Ok(_) => panic!("{} should not load", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn another_architecture_is_named() {
    let p = tmp("mamba.gguf");
    write(
        &p,
        "mamba",
        &[("token_embd.weight", tensor(&[64, 32], GgmlDType::F32))],
    );
    let e = err(&p);
    assert!(e.contains("mamba") && e.contains("architecture"), "{e}");
    let p = tmp("rwkv6.gguf");
    write(
        &p,
        "rwkv6",
        &[("token_embd.weight", tensor(&[64, 32], GgmlDType::F32))],
    );
    assert!(err(&p).contains("rwkv6"));
}

#[test]
fn an_unsupported_quantisation_is_named_with_its_tensor() {
    let p = tmp("q81.gguf");
    write(
        &p,
        "llama",
        &[
            ("token_embd.weight", tensor(&[64, 32], GgmlDType::F32)),
            ("blk.0.attn_norm.weight", tensor(&[32], GgmlDType::F32)),
            ("blk.0.attn_q.weight", tensor(&[32, 32], GgmlDType::Q8_1)),
        ],
    );
    let e = err(&p);
    assert!(
        e.contains("blk.0.attn_q.weight") && e.contains("Q8_1"),
        "{e}"
    );
}

#[test]
fn missing_and_non_gguf_files_are_refused() {
    let missing = tmp("nothing-here.gguf");
    assert!(matches!(load(&missing), Err(ModelError::Open { .. })));
    let p = tmp("not.gguf");
    std::fs::write(&p, b"definitely not a gguf file").unwrap();
    let e = load(&p).expect_err("refused");
    assert!(matches!(e, ModelError::NotGguf { .. }), "{e}");
}

/// `sluice serve` and `sluice generate` on the same bad file: both exit non-zero, and
/// serve's error carries the reason generate gives.
#[test]
fn serve_and_generate_give_the_same_reason() {
    let missing = tmp("serve-missing.gguf");
    let not_gguf = tmp("serve-not.gguf");
    std::fs::write(&not_gguf, b"definitely not a gguf file").unwrap();
    let mamba = tmp("serve-mamba.gguf");
    write(
        &mamba,
        "mamba",
        &[("token_embd.weight", tensor(&[64, 32], GgmlDType::F32))],
    );
    for (path, needle) in [
        (&missing, "cannot open model file"),
        (&not_gguf, "not a readable GGUF file"),
        (&mamba, "unsupported model architecture `mamba`"),
    ] {
        let model = path.to_str().unwrap();
        let (ok, _, gen_err) =
            common::run_sluice(&["generate", "--model", model, "--prompt", "hi"], &[]);
        assert!(!ok, "generate on {model} fails");
        let reason = gen_err
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("generate names the reason: {gen_err}"))
            .trim()
            .to_string();
        let (ok, _, serve_err) = common::run_sluice(
            &["serve", "--port", "0", "--model", model],
            &[("RUST_LOG", "off")],
        );
        assert!(!ok, "serve on {model} exits non-zero");
        assert!(
            serve_err.contains(&reason),
            "serve gives generate's reason {reason:?}: {serve_err}"
        );
    }
}

/// A flag out of its range stops `sluice serve` before it listens, naming the flag.
#[test]
fn out_of_range_flags_are_start_up_errors() {
    for (flag, value) in [
        ("--shutdown-grace", "-1"),
        ("--shutdown-grace", "NaN"),
        ("--request-timeout", "1e300"),
        ("--slots", "0"),
        ("--max-batch-tokens", "20"),
    ] {
        let arg = format!("{flag}={value}");
        let (ok, _, err) = common::run_sluice(&["serve", "--port", "0", &arg], &[]);
        assert!(!ok, "{arg} is refused");
        assert!(
            err.contains(flag) && !err.contains("panicked"),
            "{arg}: {err}"
        );
    }
}

/// A `--tokenizer` with more ids than the model has embedding rows is refused at load,
/// naming both numbers, instead of failing on the engine thread at the first such id.
#[test]
fn a_tokenizer_larger_than_the_embedding_is_refused() {
    let vocab: serde_json::Map<String, serde_json::Value> = (0..60_000)
        .map(|i| (format!("w{i}"), serde_json::json!(i)))
        .collect();
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"},
    });
    let path = tmp("big-tokenizer.json");
    std::fs::write(&path, json.to_string()).unwrap();
    let options = sluice::engine::LoadOptions {
        tokenizer: Some(path.clone()),
        ..Default::default()
    };
    let e = sluice::engine::load(&common::model_path(), &options)
        .map(|_| ())
        .expect_err("refused");
    let msg = e.to_string();
    assert!(msg.contains("60000 ids") && msg.contains("49152"), "{msg}");
    let _ = std::fs::remove_file(path);
}

/// A file declaring no attention heads is refused at load, naming the key, instead of
/// dividing by zero.
#[test]
fn zero_attention_heads_are_refused_by_name() {
    let p = tmp("zero-heads.gguf");
    write_heads(
        &p,
        "llama",
        0,
        &[("token_embd.weight", tensor(&[64, 32], GgmlDType::F32))],
    );
    let e = err(&p);
    assert!(e.contains("attention.head_count (0)"), "{e}");
    let _ = std::fs::remove_file(p);
}

/// A draft model must speak the model's vocabulary: Gemma 3's (262,144 tokens) drafting
/// for SmolLM2 (49,152) stops the server at start-up, naming both.
#[test]
fn a_draft_model_with_another_vocabulary_is_refused_at_start_up() {
    let gemma = sluice::config::default_model_path()
        .parent()
        .expect("model dir")
        .join("gemma-3-270m-q4_k_m.gguf");
    let (ok, _, err) = common::run_sluice(
        &[
            "serve",
            "--port",
            "0",
            "--draft-model",
            gemma.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!ok, "{err}");
    assert!(
        err.contains("--draft-model") && err.contains("262144") && err.contains("49152"),
        "{err}"
    );
}

/// Chat templates are untrusted: one that loops without end is refused at start-up, and
/// one that runs out of its fuel on a long conversation fails that request with a 400
/// while the server serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_chat_template_is_stopped_by_its_fuel() {
    let forever = tmp("forever.jinja");
    std::fs::write(
        &forever,
        "{% for i in range(10000) %}{% for j in range(10000) %}x{% endfor %}{% endfor %}",
    )
    .unwrap();
    let (ok, _, err) = common::run_sluice(
        &[
            "serve",
            "--port",
            "0",
            "--chat-template",
            forever.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!ok && err.contains("fuel"), "{err}");

    let quadratic = tmp("quadratic.jinja");
    std::fs::write(
        &quadratic,
        "{% for m in messages %}{% for n in messages %}{% for i in range(2000) %}{% endfor %}\
         {% endfor %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         <|im_start|>assistant\n",
    )
    .unwrap();
    let server = common::Spawned::ready(
        &[
            "serve",
            "--slots",
            "2",
            "--context",
            "512",
            "--chat-template",
            quadratic.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let client = reqwest::Client::new();
    let chat = |n: usize| {
        let messages: Vec<serde_json::Value> = (0..n)
            .map(|i| serde_json::json!({"role": "user", "content": format!("m{i}")}))
            .collect();
        client
            .post(format!("{}/v1/chat/completions", server.base))
            .json(&serde_json::json!({"messages": messages, "max_tokens": 2}))
            .send()
    };
    let r = chat(100).await.unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["param"], "messages", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("fuel"),
        "{body}"
    );
    let r = chat(2).await.unwrap();
    assert_eq!(r.status(), 200, "the server serves on");
    let _ = std::fs::remove_file(forever);
    let _ = std::fs::remove_file(quadratic);
}
