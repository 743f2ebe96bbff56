//! Model files are untrusted input. Crafted GGUF files (a header whose lengths, counts,
//! offsets or shapes lie; absurd hyper-parameters; a broken vocabulary; a chat template
//! that loops) are each refused with an error naming the problem: by the loader, by
//! `sluice serve` at start-up, and by a running server's `/admin/reload`, which serves on.

mod common;

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use serde_json::{Value as Json, json};

const TOKEN: &str = "untrusted-files-admin";

/// A GGUF file written byte by byte, so that every field can lie.
struct Raw(Vec<u8>);

impl Raw {
    fn new(version: u32, tensors: u64, keys: u64) -> Self {
        Raw(b"GGUF".to_vec()).u32(version).u64(tensors).u64(keys)
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend(b);
        self
    }
    fn str(self, s: &str) -> Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    fn kv_u32(self, key: &str, v: u32) -> Self {
        self.str(key).u32(4).u32(v)
    }
    /// A directory entry: dimensions innermost first, ggml type, data offset.
    fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Self {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    /// Pads to 32 bytes and appends `n` bytes of tensor data.
    fn data(mut self, n: usize) -> Self {
        let pad = self.0.len().next_multiple_of(32) - self.0.len();
        self.0.resize(self.0.len() + pad + n, 0);
        self
    }
}

const F32: u32 = 0;
const Q4_0: u32 = 2;

/// Every crafted header with the words its error must contain. Each (but the truncated
/// file) ends in 64 spare bytes, so that the lie under test is what the reader finds
/// first, not a count too large for the bytes left.
fn crafted() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let mut cases = headers();
    for (name, bytes, _) in &mut cases {
        if *name != "truncated" {
            bytes.extend([0; 64]);
        }
    }
    cases
}

fn headers() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let nested = {
        let mut r = Raw::new(3, 0, 1).str("deep").u32(9);
        for _ in 0..10 {
            r = r.u32(9).u64(1);
        }
        r.u32(4).u64(1).u32(7)
    };
    let mut strings = Raw::new(3, 0, 1)
        .str("tokenizer.ggml.tokens")
        .u32(9)
        .u32(8)
        .u64(1_000_000);
    for _ in 0..100 {
        strings = strings.str("tok");
    }
    let real = std::fs::read(common::model_path()).expect("the default model");
    vec![
        ("version-1", Raw::new(1, 0, 0).0, "GGUF version 1"),
        ("not-gguf", b"GGML and then some bytes".to_vec(), "magic"),
        (
            "huge-string",
            Raw::new(3, 0, 1).u64(1 << 60).bytes(b"abc").0,
            "over the limit",
        ),
        (
            "string-past-end",
            Raw::new(3, 0, 1).u64(1000).bytes(b"general.name").0,
            "but the file ends",
        ),
        (
            "huge-tensor-count",
            Raw::new(3, 1 << 40, 0).0,
            "tensor count is 1099511627776, over the limit",
        ),
        (
            "key-count-past-end",
            Raw::new(3, 0, 60_000).kv_u32("general.alignment", 32).0,
            "bytes of the file remain",
        ),
        (
            "huge-array",
            Raw::new(3, 0, 1)
                .str("tokenizer.ggml.tokens")
                .u32(9)
                .u32(8)
                .u64(1 << 40)
                .0,
            "over the limit",
        ),
        ("array-past-end", strings.0, "bytes of the file remain"),
        ("nested-arrays", nested.0, "nested deeper"),
        (
            "bad-bool",
            Raw::new(3, 0, 1).str("flag").u32(7).bytes(&[7]).0,
            "a bool of value 7",
        ),
        (
            "duplicate-key",
            Raw::new(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2).0,
            "`a` twice",
        ),
        (
            "alignment-zero",
            Raw::new(3, 1, 1)
                .kv_u32("general.alignment", 0)
                .tensor("t", &[32], F32, 0)
                .data(128)
                .0,
            "general.alignment 0",
        ),
        (
            "tensor-past-end",
            Raw::new(3, 1, 0).tensor("t", &[1024], F32, 0).data(64).0,
            "lies past the end",
        ),
        (
            "tensor-offset-wraps",
            Raw::new(3, 1, 0)
                .tensor("t", &[32], F32, u64::MAX - 31)
                .data(128)
                .0,
            "lies past the end",
        ),
        (
            "overlapping-tensors",
            Raw::new(3, 2, 0)
                .tensor("a", &[32], F32, 0)
                .tensor("b", &[32], F32, 64)
                .data(256)
                .0,
            "overlap",
        ),
        (
            "shape-overflows",
            Raw::new(3, 1, 0)
                .tensor("t", &[1 << 32, 1 << 32, 1 << 32], F32, 0)
                .data(32)
                .0,
            "more elements than fit",
        ),
        (
            "too-many-dimensions",
            Raw::new(3, 1, 0).str("t").u32(1000).u64(1).0,
            "1000 dimensions",
        ),
        (
            "zero-dimension",
            Raw::new(3, 1, 0).tensor("t", &[0], F32, 0).data(32).0,
            "a dimension of 0",
        ),
        (
            "unknown-type",
            Raw::new(3, 1, 0).tensor("t", &[32], 99, 0).data(128).0,
            "ggml type 99",
        ),
        (
            "partial-block",
            Raw::new(3, 1, 0).tensor("t", &[33], Q4_0, 0).data(128).0,
            "not whole",
        ),
        (
            "misaligned-offset",
            Raw::new(3, 1, 0).tensor("t", &[32], F32, 8).data(256).0,
            "not a multiple of the alignment",
        ),
        (
            "truncated",
            real[..100_000].to_vec(),
            "bytes of the file remain",
        ),
    ]
}

/// A directory of each test's own (tests run in parallel).
fn dir(test: &str) -> PathBuf {
    let d = common::scratch("untrusted-files").join(test);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes each crafted header as a file in `test`'s directory; returns `(path, needle)`.
fn crafted_files(test: &str) -> Vec<(PathBuf, &'static str)> {
    crafted()
        .into_iter()
        .map(|(name, bytes, needle)| {
            let p = dir(test).join(format!("{name}.gguf"));
            std::fs::write(&p, bytes).unwrap();
            (p, needle)
        })
        .collect()
}

/// A copy of the default model with its metadata edited (tensors untouched).
fn edited(test: &str, name: &str, edit: impl Fn(&mut Vec<(String, Value)>)) -> PathBuf {
    let mut r = std::fs::File::open(common::model_path()).unwrap();
    let content = gguf_file::Content::read(&mut r).unwrap();
    let mut meta: Vec<(String, Value)> = content.metadata.clone().into_iter().collect();
    meta.sort_by(|a, b| a.0.cmp(&b.0));
    edit(&mut meta);
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tensors: Vec<_> = names
        .iter()
        .map(|n| {
            (
                n.as_str(),
                content
                    .tensor(&mut r, n, &candle_core::Device::Cpu)
                    .unwrap(),
            )
        })
        .collect();
    let p = dir(test).join(format!("{name}.gguf"));
    let mut f = std::fs::File::create(&p).unwrap();
    let meta: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &_)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    gguf_file::write(&mut f, &meta, &tensors).unwrap();
    p
}

fn set(meta: &mut Vec<(String, Value)>, key: &str, value: Value) {
    meta.retain(|(k, _)| k != key);
    meta.push((key.to_string(), value));
}

/// Well-formed files whose contents are hostile: each with its needle.
fn hostile_models(test: &str) -> Vec<(PathBuf, &'static str)> {
    vec![
        (
            edited(test, "layers-2-40", |m| {
                set(m, "llama.block_count", Value::U64(1 << 40))
            }),
            "block_count is 1099511627776, over",
        ),
        (
            edited(test, "heads-2-30", |m| {
                set(m, "llama.attention.head_count", Value::U32(1 << 30));
                set(m, "llama.attention.head_count_kv", Value::U32(1 << 30));
            }),
            "head_count is 1073741824, over",
        ),
        (
            edited(test, "tokens-not-strings", |m| {
                set(
                    m,
                    "tokenizer.ggml.tokens",
                    Value::Array((0..49152).map(Value::U32).collect()),
                )
            }),
            "tokenizer.ggml.tokens",
        ),
        (
            edited(test, "eos-outside-vocab", |m| {
                set(m, "tokenizer.ggml.eos_token_id", Value::U32(u32::MAX))
            }),
            "special token id 4294967295",
        ),
        looping_template(test),
    ]
}

/// The default model with a chat template that loops without end.
fn looping_template(test: &str) -> (PathBuf, &'static str) {
    let forever =
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    let p = edited(test, "looping-template", |m| {
        set(m, "tokenizer.chat_template", Value::String(forever.into()))
    });
    (p, "fuel")
}

fn load_error(path: &Path) -> String {
    match sluice::engine::load(path, &Default::default()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn crafted_headers_are_refused_by_name() {
    for (path, needle) in crafted_files("headers") {
        let e = load_error(&path);
        assert!(
            e.contains("not a readable GGUF file") && e.contains(needle),
            "{}: {needle:?} not in {e:?}",
            path.display()
        );
    }
}

#[test]
fn hostile_contents_are_refused_by_name() {
    for (path, needle) in hostile_models("contents") {
        let e = load_error(&path);
        assert!(
            e.contains(needle),
            "{}: {needle:?} not in {e:?}",
            path.display()
        );
        let _ = std::fs::remove_file(path);
    }
}

/// `sluice serve` stops at start-up with the reason, as `sluice generate` does.
#[test]
fn serve_refuses_a_crafted_file_at_start_up() {
    let (path, needle) = crafted_files("serve").remove(4);
    let model = path.to_str().unwrap();
    for args in [
        &["serve", "--port", "0", "--model", model][..],
        &["generate", "--model", model, "--prompt", "hi"][..],
    ] {
        let (ok, _, err) = common::run_sluice(args, &[("RUST_LOG", "off")]);
        assert!(!ok, "{args:?} exits non-zero");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

async fn post(base: &str, path: &str, body: Json, token: Option<&str>) -> (u16, Json) {
    let mut r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Json::Null))
}

/// Offered to a running server's reload, every crafted file is a 422 naming the problem,
/// and the server answers as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_refuses_crafted_files_and_serves_on() {
    let base = common::server_with(|c| {
        c.admin_token = Some(TOKEN.into());
        c.reload_dirs = vec![dir("reload")];
    });
    let ask = json!({"prompt": "The river", "max_tokens": 8, "temperature": 0});
    let (s, before) = post(base, "/v1/completions", ask.clone(), None).await;
    assert_eq!(s, 200, "{before}");
    // (A reload swaps the weights only: the tokenizer and template it keeps are the ones
    // loaded at start-up, so only headers are offered here.)
    for (path, needle) in crafted_files("reload") {
        let (s, b) = post(base, "/admin/reload", json!({"path": path}), Some(TOKEN)).await;
        let msg = b["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(s, 422, "{}: {b}", path.display());
        assert!(
            msg.contains(needle),
            "{}: {needle:?} not in {msg:?}",
            path.display()
        );
    }
    let (s, after) = post(base, "/v1/completions", ask, None).await;
    assert_eq!(s, 200, "{after}");
    assert_eq!(after["choices"][0]["text"], before["choices"][0]["text"]);
}

/// A safetensors file: its 8-byte header length, the JSON header, then `data` bytes.
fn safetensors(len: Option<u64>, header: &Json, data: usize) -> Vec<u8> {
    let h = header.to_string().into_bytes();
    let mut b = len.unwrap_or(h.len() as u64).to_le_bytes().to_vec();
    b.extend(h);
    b.resize(b.len() + data, 0);
    b
}

/// Hugging Face folders: a `config.json` whose sizes are absurd, and safetensors headers
/// that lie (lengths, offsets, shapes), each refused by name.
#[test]
fn crafted_folders_are_refused_by_name() {
    let config = json!({
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 2,
        "num_hidden_layers": 1, "intermediate_size": 64, "vocab_size": 32,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-5
    });
    let t = |shape: Json, a: u64, b: u64| json!({"dtype": "F32", "shape": shape, "data_offsets": [a, b]});
    let cases = vec![
        (
            "header-too-large",
            safetensors(Some(1 << 60), &json!({}), 0),
            "not a safetensors file",
        ),
        (
            "header-past-end",
            safetensors(Some(1000), &json!({}), 0),
            "not a safetensors file",
        ),
        (
            "data-past-end",
            safetensors(
                None,
                &json!({"model.norm.weight": t(json!([64]), 0, 256)}),
                16,
            ),
            "not a safetensors file",
        ),
        (
            "shape-overflows",
            safetensors(
                None,
                &json!({"model.norm.weight": t(json!([1u64 << 62, 1u64 << 62]), 0, 16)}),
                16,
            ),
            "not a safetensors file",
        ),
        (
            "overlapping",
            safetensors(
                None,
                &json!({"a.weight": t(json!([4]), 0, 16), "b.weight": t(json!([4]), 8, 24)}),
                24,
            ),
            "not a safetensors file",
        ),
    ];
    for (name, bytes, needle) in cases {
        let d = dir("folders").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.json"), config.to_string()).unwrap();
        std::fs::write(d.join("model.safetensors"), bytes).unwrap();
        let e = load_error(&d);
        assert!(e.contains(needle), "{name}: {needle:?} not in {e:?}");
    }
    let d = dir("folders").join("huge-config");
    std::fs::create_dir_all(&d).unwrap();
    let mut huge = config.clone();
    huge["hidden_size"] = json!(1u64 << 40);
    std::fs::write(d.join("config.json"), huge.to_string()).unwrap();
    std::fs::write(
        d.join("model.safetensors"),
        safetensors(None, &json!({}), 0),
    )
    .unwrap();
    let e = load_error(&d);
    assert!(e.contains("hidden_size is 1099511627776, over"), "{e}");
}
