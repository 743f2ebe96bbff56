//! `/v1/embeddings`: the default model with mean pooling against llama.cpp's server on the
//! same file (`--embeddings --pooling mean`), a tiny Qwen 3 folder with last-token pooling
//! (the Qwen3-Embedding recipe) against transformers (`tests/data/embeddings.json`, made by
//! `scripts/golden/embeddings.py`), the wire shapes (base64, `dimensions`, token-id
//! inputs, usage), and bad requests; and `/v1/rerank` with the Qwen3-Reranker recipe
//! against transformers (`tests/data/rerank.json`, made by `scripts/golden/rerank.py`), by
//! the yes/no answer and by a classification head holding the same recipe.

mod common;

use base64::Engine as _;
use candle_core::Tensor;
use serde_json::{Value, json};

fn data() -> Value {
    let p = common::data_dir().join("embeddings.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("embeddings.json")).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn mean_pooling_matches_llama_cpp() {
    let d = &data()["llamacpp"];
    assert_eq!(
        common::sha256(&common::model_path()),
        d["model_sha256"].as_str().unwrap(),
        "the reference was made on another file"
    );
    let s = common::Spawned::ready(&["serve", "--pooling", "mean"], &[]).await;
    let models = common::get_json(&format!("{}/v1/models", s.base)).await;
    assert_eq!(
        models["data"][0]["capabilities"],
        json!(["completion", "chat", "tools", "embeddings"])
    );
    let url = format!("{}/v1/embeddings", s.base);
    // Texts are tokenised as llama.cpp tokenised them.
    for (t, want) in d["texts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(d["tokens"].as_array().unwrap())
    {
        let tok = common::post_json(&format!("{}/tokenize", s.base), &json!({"prompt": t})).await;
        assert_eq!(&tok["tokens"], want, "{t}");
    }
    let (status, r) = post(&url, &json!({"input": d["texts"]})).await;
    assert_eq!(status, 200, "{r}");
    let want = d["vectors"].as_array().unwrap();
    assert_eq!(r["data"].as_array().unwrap().len(), want.len());
    let mut worst = 1.0f64;
    for (i, w) in want.iter().enumerate() {
        let got = &r["data"][i];
        assert_eq!(got["index"], i);
        assert_eq!(got["object"], "embedding");
        let v = floats(&got["embedding"]);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "unit length: {norm}");
        worst = worst.min(cosine(&v, &floats(w)));
    }
    println!("worst cosine with llama.cpp: {worst:.6}");
    assert!(worst >= 0.999, "worst cosine {worst}");
    let tokens: usize = d["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_array().unwrap().len())
        .sum();
    assert_eq!(r["usage"]["prompt_tokens"], tokens);

    // The same inputs as token ids, one at a time, give the same vectors.
    let (_, one) = post(&url, &json!({"input": d["tokens"][2]})).await;
    let a = floats(&one["data"][0]["embedding"]);
    let b = floats(&r["data"][2]["embedding"]);
    assert!(cosine(&a, &b) > 0.99999, "batched and alone agree");

    // base64, as the official SDK asks: little-endian f32.
    let (_, b64) = post(
        &url,
        &json!({"input": "Paris is the capital of France.",
                                      "encoding_format": "base64"}),
    )
    .await;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f64> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
        .collect();
    assert!(cosine(&decoded, &floats(&r["data"][4]["embedding"])) > 0.99999);

    // dimensions: the first 64, back to unit length.
    let (_, short) = post(&url, &json!({"input": d["texts"][0], "dimensions": 64})).await;
    let v = floats(&short["data"][0]["embedding"]);
    assert_eq!(v.len(), 64);
    let full = floats(&r["data"][0]["embedding"]);
    assert!(cosine(&v, &full[..64]) > 0.99999);
    assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-4);
}

#[tokio::test]
async fn last_token_pooling_matches_transformers() {
    let d = &data()["transformers"];
    let dir = common::golden_write("hf_families.py", "embeddings-hf");
    let folder = dir.join("qwen3");
    let s = common::Spawned::ready(
        &["serve", "--pooling", "last", "--quantize", "none"],
        &[("SLUICE_MODEL", folder.to_str().unwrap())],
    )
    .await;
    let url = format!("{}/v1/embeddings", s.base);
    let (status, r) = post(&url, &json!({"input": d["ids"]})).await;
    assert_eq!(status, 200, "{r}");
    for (i, w) in d["vectors"].as_array().unwrap().iter().enumerate() {
        let got = floats(&r["data"][i]["embedding"]);
        let want = floats(w);
        let max = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        println!(
            "input {i}: max |delta| {max:.2e}, cosine {:.8}",
            cosine(&got, &want)
        );
        assert!(cosine(&got, &want) > 0.99999 && max < 1e-3, "input {i}");
    }
}

#[tokio::test]
async fn bad_embedding_requests_are_refused_by_field() {
    let plain = common::Spawned::ready(&["serve", "--context", "64"], &[]).await;
    let (status, r) = post(
        &format!("{}/v1/embeddings", plain.base),
        &json!({"input": "hi"}),
    )
    .await;
    assert_eq!(
        (status, r["error"]["param"].as_str()),
        (400, Some("model")),
        "{r}"
    );

    let s = common::Spawned::ready(&["serve", "--pooling", "mean", "--context", "64"], &[]).await;
    let url = format!("{}/v1/embeddings", s.base);
    let long = "word ".repeat(200);
    for (body, param) in [
        (json!({"input": []}), "input"),
        (json!({"input": ""}), "input"),
        (json!({"input": ["ok", ""]}), "input"),
        (json!({"input": long}), "input"),
        (json!({"input": [[1, 2, 99999999]]}), "input"),
        (json!({"input": "hi", "dimensions": 0}), "dimensions"),
        (json!({"input": "hi", "dimensions": 100000}), "dimensions"),
        (
            json!({"input": "hi", "encoding_format": "hex"}),
            "encoding_format",
        ),
    ] {
        let (status, r) = post(&url, &body).await;
        assert_eq!(status, 400, "{body}: {r}");
        assert_eq!(r["error"]["param"], param, "{body}: {r}");
        assert_eq!(r["error"]["type"], "invalid_request_error");
    }
    let (status, r) = post(&url, &json!({"input": "hi", "model": "nope"})).await;
    assert_eq!(status, 404, "{r}");
    // The server still answers.
    let (status, _) = post(&url, &json!({"input": "hi"})).await;
    assert_eq!(status, 200);
}

/// The Qwen3-Reranker recipe on the default model against transformers on the same file
/// (dequantised to f32; `tests/data/rerank.json`, made by `scripts/golden/rerank.py`): the
/// same prompt ids, P(yes) within 0.01 of transformers' (sluice's matmuls quantise their
/// activations), results best first.
#[tokio::test]
async fn rerank_matches_transformers() {
    let p = common::data_dir().join("rerank.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_eq!(
        common::sha256(&common::model_path()),
        d["model_sha256"].as_str().unwrap()
    );
    let s = common::Spawned::ready(&["serve", "--rerank"], &[]).await;
    let models = common::get_json(&format!("{}/v1/models", s.base)).await;
    assert_eq!(
        models["data"][0]["capabilities"],
        json!(["completion", "chat", "tools", "rerank"])
    );
    let (query, instruction) = (
        d["query"].as_str().unwrap(),
        d["instruction"].as_str().unwrap(),
    );
    for (doc, ids) in d["documents"]
        .as_array()
        .unwrap()
        .iter()
        .zip(d["ids"].as_array().unwrap())
    {
        let text = sluice::http::openai::rerank::prompt(instruction, query, doc.as_str().unwrap());
        let tok =
            common::post_json(&format!("{}/tokenize", s.base), &json!({"prompt": text})).await;
        assert_eq!(
            &tok["tokens"], ids,
            "the prompt is tokenised as transformers tokenised it"
        );
    }
    let url = format!("{}/v1/rerank", s.base);
    let (status, r) = post(&url, &json!({"query": query, "documents": d["documents"]})).await;
    assert_eq!(status, 200, "{r}");
    let want = floats(&d["scores"]);
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), want.len());
    let mut got = vec![f64::NAN; want.len()];
    for (k, x) in results.iter().enumerate() {
        let i = x["index"].as_u64().unwrap() as usize;
        got[i] = x["relevance_score"].as_f64().unwrap();
        assert_eq!(x["document"]["text"], d["documents"][i]);
        if k > 0 {
            assert!(results[k - 1]["relevance_score"].as_f64() >= x["relevance_score"].as_f64());
        }
    }
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        println!("document {i}: sluice {g:.5}, transformers {w:.5}");
        assert!((g - w).abs() <= 0.01, "document {i}: {g} against {w}");
    }
    // Documents transformers tells apart by more than twice the allowance come in its order.
    for i in 0..want.len() {
        for j in 0..want.len() {
            if want[i] > want[j] + 0.02 {
                assert!(got[i] > got[j], "documents {i} and {j}");
            }
        }
    }
    let (_, top) = post(
        &url,
        &json!({"query": query, "documents": d["documents"], "top_n": 2,
                                      "return_documents": false}),
    )
    .await;
    let top = top["results"].as_array().unwrap();
    assert_eq!(top.len(), 2);
    assert_eq!(top[0]["index"], results[0]["index"]);
    assert!(top[0].get("document").is_none());
    for (body, param) in [
        (json!({"query": query, "documents": []}), "documents"),
        (json!({"query": "", "documents": ["a"]}), "query"),
        (
            json!({"query": query, "documents": ["a"], "top_n": 0}),
            "top_n",
        ),
    ] {
        let (status, r) = post(&url, &body).await;
        assert_eq!(
            (status, r["error"]["param"].as_str()),
            (400, Some(param)),
            "{body}: {r}"
        );
    }
}

#[tokio::test]
async fn rerank_needs_the_flag() {
    let s = common::Spawned::ready(&["serve"], &[]).await;
    let (status, r) = post(
        &format!("{}/v1/rerank", s.base),
        &json!({"query": "q", "documents": ["d"]}),
    )
    .await;
    assert_eq!(
        (status, r["error"]["param"].as_str()),
        (400, Some("model")),
        "{r}"
    );
}

/// A copy of the default model with a classification head, as llama.cpp's converter writes
/// a Qwen3-Reranker: `cls.output.weight` holds rows of the output head, the pooling type is
/// rank, and the prompt is `tokenizer.chat_template.rerank`. `rows` makes the head from
/// the `yes` and `no` rows; `dense` puts a `cls.weight` layer before it.
fn head_file(
    name: &str,
    rows: impl Fn(&Tensor, &Tensor) -> Tensor,
    labels: bool,
    dense: Option<f32>,
) -> std::path::PathBuf {
    use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
    let d = rerank_data();
    let cpu = candle_core::Device::Cpu;
    let mut r = std::fs::File::open(common::model_path()).unwrap();
    let content = gguf_file::Content::read(&mut r).unwrap();
    let mut tensors: Vec<(String, QTensor)> = content
        .tensor_infos
        .keys()
        .map(|n| (n.clone(), content.tensor(&mut r, n, &cpu).unwrap()))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let head = if content.tensor_infos.contains_key("output.weight") {
        "output.weight"
    } else {
        "token_embd.weight"
    };
    let w = content
        .tensor(&mut r, head, &cpu)
        .unwrap()
        .dequantize(&cpu)
        .unwrap();
    let row = |key: &str| w.get(d[key].as_u64().unwrap() as usize).unwrap();
    let mut out = rows(&row("yes"), &row("no"));
    let hidden = w.dim(1).unwrap();
    if let Some(scale) = dense {
        // tanh(scale·h), then the head divided by scale: nearly the head alone.
        let eye =
            (Tensor::eye(hidden, candle_core::DType::F32, &cpu).unwrap() * scale as f64).unwrap();
        let zero = Tensor::zeros(hidden, candle_core::DType::F32, &cpu).unwrap();
        tensors.push((
            "cls.weight".into(),
            QTensor::quantize(&eye, GgmlDType::F32).unwrap(),
        ));
        tensors.push((
            "cls.bias".into(),
            QTensor::quantize(&zero, GgmlDType::F32).unwrap(),
        ));
        out = (out / scale as f64).unwrap();
    }
    tensors.push((
        "cls.output.weight".into(),
        QTensor::quantize(&out, GgmlDType::F32).unwrap(),
    ));
    let arch = content.metadata["general.architecture"]
        .to_string()
        .unwrap()
        .clone();
    let mut meta: Vec<(String, gguf_file::Value)> = content.metadata.clone().into_iter().collect();
    meta.push((format!("{arch}.pooling_type"), gguf_file::Value::U32(4)));
    if labels {
        meta.push((
            format!("{arch}.classifier.output_labels"),
            gguf_file::Value::Array(vec![
                gguf_file::Value::String("yes".into()),
                gguf_file::Value::String("no".into()),
            ]),
        ));
    }
    let template = sluice::http::openai::rerank::prompt(
        d["instruction"].as_str().unwrap(),
        "{query}",
        "{document}",
    );
    meta.push((
        "tokenizer.chat_template.rerank".into(),
        gguf_file::Value::String(template),
    ));
    meta.sort_by(|a, b| a.0.cmp(&b.0));
    let p = common::scratch("embeddings").join(format!("{name}.gguf"));
    let mut f = std::fs::File::create(&p).unwrap();
    let meta: Vec<(&str, &gguf_file::Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    gguf_file::write(&mut f, &meta, &tensors).unwrap();
    p
}

fn rerank_data() -> Value {
    let p = common::data_dir().join("rerank.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A reranker by classification head, served without `--rerank`: two labels (`yes`, `no`:
/// a softmax, as llama.cpp converts Qwen3-Reranker), and one label (`yes` minus `no`: a
/// sigmoid) behind a dense tanh layer. Both hold the recipe of `rerank.json`, so each
/// document's score is transformers' P(yes) there: within 0.015 (0.0104 at most on these
/// documents; the head is f32, where the yes/no answer's output head multiplies int8
/// activations, so the two readouts of the same hidden state differ by up to 0.012), and
/// the two files within 0.001 of each other.
#[tokio::test]
async fn a_classification_head_reranks_as_transformers_scores() {
    let d = rerank_data();
    assert_eq!(
        common::sha256(&common::model_path()),
        d["model_sha256"].as_str().unwrap()
    );
    let want = floats(&d["scores"]);
    let files = [
        head_file(
            "two-labels",
            |y, n| Tensor::stack(&[y, n], 0).unwrap(),
            true,
            None,
        ),
        head_file(
            "one-label-dense",
            |y, n| (y - n).unwrap().unsqueeze(0).unwrap(),
            false,
            Some(1e-3),
        ),
    ];
    let mut first: Option<Vec<f64>> = None;
    for file in files {
        let s = common::Spawned::ready(&["serve", "--model", file.to_str().unwrap()], &[]).await;
        let models = common::get_json(&format!("{}/v1/models", s.base)).await;
        let caps = models["data"][0]["capabilities"].as_array().unwrap();
        assert!(caps.contains(&json!("rerank")), "{models}");
        let (status, r) = post(
            &format!("{}/v1/rerank", s.base),
            &json!({"query": d["query"], "documents": d["documents"]}),
        )
        .await;
        assert_eq!(status, 200, "{}: {r}", file.display());
        assert_eq!(
            r["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
            d["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_array().unwrap().len())
                .sum::<usize>(),
            "the file's template makes the prompts transformers scored"
        );
        let mut got = vec![f64::NAN; want.len()];
        for x in r["results"].as_array().unwrap() {
            got[x["index"].as_u64().unwrap() as usize] = x["relevance_score"].as_f64().unwrap();
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            println!(
                "{}: document {i}: sluice {g:.5}, transformers {w:.5}",
                file.display()
            );
            assert!((g - w).abs() <= 0.015, "document {i}: {g} against {w}");
        }
        match &first {
            None => first = Some(got),
            Some(f) => {
                for (i, (a, b)) in f.iter().zip(&got).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-3,
                        "document {i}: the files give {a} and {b}"
                    );
                }
            }
        }
    }
}
