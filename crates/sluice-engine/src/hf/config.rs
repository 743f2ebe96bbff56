//! `config.json` and `tokenizer_config.json` as the GGUF metadata llama.cpp's converter
//! writes for them, including RoPE scaling (Llama 3's and Phi-3's frequency factors become
//! the tensors GGUF stores them as).

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use serde_json::Value as Json;

use crate::error::ModelError;

/// What the converter needs from the folder's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// GGUF architecture name.
    pub arch: &'static str,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Per-head size.
    pub head_dim: usize,
    /// The output head is the embedding table.
    pub tied: bool,
    /// GGUF metadata.
    pub metadata: HashMap<String, Value>,
    /// RoPE frequency factors to store as tensors (`rope_freqs`, `rope_factors_*`).
    pub factors: Vec<(String, Vec<f32>)>,
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> Result<Json, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|reason| ModelError::Open {
        path: path.to_path_buf(),
        reason,
    })?;
    serde_json::from_str(&text).map_err(|e| ModelError::NotGguf {
        path: path.to_path_buf(),
        reason: format!("invalid JSON: {e}"),
    })
}

fn num(v: &Json, k: &str) -> Option<f64> {
    v.get(k).and_then(Json::as_f64)
}

/// The id of a special token given as text (`"<s>"` or `{"content": "<s>"}`) in
/// `tokenizer.json`'s vocabulary or added tokens.
fn token_id(tokenizer: &Json, tok: &Json) -> Option<u32> {
    let text = tok.as_str().or_else(|| tok.get("content")?.as_str())?;
    if let Some(id) = tokenizer["model"]["vocab"].get(text).and_then(Json::as_u64) {
        return Some(id as u32);
    }
    tokenizer["added_tokens"]
        .as_array()?
        .iter()
        .find(|t| t["content"].as_str() == Some(text))
        .and_then(|t| t["id"].as_u64())
        .map(|id| id as u32)
}

impl Config {
    /// Reads `dir/config.json` (and the tokenizer files beside it).
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        let mut c = read_json(&dir.join("config.json"))?;
        if let Some(text) = c.get("text_config").cloned() {
            // Multimodal checkpoints (Gemma 3 4B+): the language model's settings.
            let top = c.clone();
            c = text;
            for k in ["tie_word_embeddings", "bos_token_id", "eos_token_id"] {
                if c.get(k).is_none()
                    && let Some(v) = top.get(k)
                {
                    c[k] = v.clone();
                }
            }
        }
        let model_type = c["model_type"].as_str().unwrap_or_default().to_string();
        let arch = match model_type.as_str() {
            "llama" | "mistral" => "llama",
            "qwen2" => "qwen2",
            "qwen3" => "qwen3",
            "phi3" => "phi3",
            "gemma3_text" | "gemma3" => "gemma3",
            other => {
                return Err(ModelError::Architecture {
                    found: format!("{other} (config.json model_type)"),
                    supported: vec!["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3_text"],
                });
            }
        };
        let missing = |k: &str| ModelError::Metadata(format!("config.json {k}"));
        let u = |k: &str| num(&c, k).map(|v| v as usize).ok_or_else(|| missing(k));
        let dim = u("hidden_size")?;
        let n_heads = u("num_attention_heads")?;
        let n_kv_heads = u("num_key_value_heads").unwrap_or(n_heads);
        let head_dim = u("head_dim").unwrap_or(dim / n_heads.max(1));
        // Sizes that are allocated from (RoPE tables) before any tensor is checked: a
        // crafted config.json must not turn them into an abort. The GGUF limits apply after.
        for (k, v, limit) in [
            ("hidden_size", dim, 1 << 20),
            ("num_attention_heads", n_heads, 1 << 12),
            ("head_dim", head_dim, 1 << 12),
        ] {
            if v > limit {
                return Err(ModelError::Unsupported(format!(
                    "config.json {k} is {v}, over sluice's limit of {limit}"
                )));
            }
        }
        let gemma = arch == "gemma3";
        let key = |k: &str| format!("{arch}.{k}");
        let mut m: HashMap<String, Value> = HashMap::new();
        let mut put = |k: String, v: Value| {
            m.insert(k, v);
        };
        put("general.architecture".into(), Value::String(arch.into()));
        put(
            "general.name".into(),
            Value::String(
                dir.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
        );
        put(
            key("block_count"),
            Value::U32(u("num_hidden_layers")? as u32),
        );
        put(
            key("context_length"),
            Value::U32(u("max_position_embeddings").unwrap_or(4096) as u32),
        );
        put(key("embedding_length"), Value::U32(dim as u32));
        put(
            key("feed_forward_length"),
            Value::U32(u("intermediate_size")? as u32),
        );
        put(key("attention.head_count"), Value::U32(n_heads as u32));
        put(
            key("attention.head_count_kv"),
            Value::U32(n_kv_heads as u32),
        );
        put(key("attention.key_length"), Value::U32(head_dim as u32));
        put(key("attention.value_length"), Value::U32(head_dim as u32));
        let eps = num(&c, "rms_norm_eps").unwrap_or(1e-6);
        put(
            key("attention.layer_norm_rms_epsilon"),
            Value::F32(eps as f32),
        );
        let base = num(&c, "rope_theta").unwrap_or(10_000.0);
        put(key("rope.freq_base"), Value::F32(base as f32));
        if let Some(p) = num(&c, "partial_rotary_factor") {
            put(
                key("rope.dimension_count"),
                Value::U32((head_dim as f64 * p) as u32),
            );
        }
        if gemma {
            if let Some(w) = num(&c, "sliding_window") {
                put(key("attention.sliding_window"), Value::U32(w as u32));
            }
            if let Some(types) = c["layer_types"].as_array() {
                let v = types
                    .iter()
                    .map(|t| Value::Bool(t.as_str() == Some("sliding_attention")))
                    .collect();
                put(key("attention.sliding_window_pattern"), Value::Array(v));
            } else if let Some(p) = num(&c, "sliding_window_pattern") {
                put(
                    key("attention.sliding_window_pattern"),
                    Value::U32(p as u32),
                );
            }
            if let Some(b) = num(&c, "rope_local_base_freq") {
                put(key("rope.freq_base_swa"), Value::F32(b as f32));
            }
            if let Some(s) = num(&c, "final_logit_softcapping") {
                put(key("final_logit_softcapping"), Value::F32(s as f32));
            }
            // Gemma's attention scale is 1/sqrt(query_pre_attn_scalar), which is not the
            // head size in every model (27B). GGUF has no key for it (llama.cpp infers it
            // from the size); a folder's is kept under this one.
            if let Some(q) = num(&c, "query_pre_attn_scalar") {
                put(key("attention.query_pre_attn_scalar"), Value::F32(q as f32));
            }
        } else if arch == "llama"
            && let Some(w) = num(&c, "sliding_window")
        {
            put(key("attention.sliding_window"), Value::U32(w as u32));
        }
        let mut factors = Vec::new();
        let rot =
            num(&c, "partial_rotary_factor").map_or(head_dim, |p| (head_dim as f64 * p) as usize);
        let rot = rot.min(head_dim);
        if let Some(rs) = c.get("rope_scaling").filter(|v| v.is_object()) {
            let kind = rs["rope_type"]
                .as_str()
                .or(rs["type"].as_str())
                .unwrap_or("none");
            let factor = num(rs, "factor").unwrap_or(1.0);
            match kind {
                "linear" => {
                    put(key("rope.scaling.type"), Value::String("linear".into()));
                    put(key("rope.scaling.factor"), Value::F32(factor as f32));
                }
                "llama3" => {
                    factors.push(("rope_freqs.weight".into(), llama3_factors(rs, base, rot)))
                }
                "longrope" | "su" => {
                    let list = |k: &str| -> Vec<f32> {
                        rs[k].as_array().map_or(Vec::new(), |a| {
                            a.iter()
                                .filter_map(Json::as_f64)
                                .map(|x| x as f32)
                                .collect()
                        })
                    };
                    factors.push(("rope_factors_long.weight".into(), list("long_factor")));
                    factors.push(("rope_factors_short.weight".into(), list("short_factor")));
                    let orig = num(&c, "original_max_position_embeddings").unwrap_or(4096.0);
                    let scale = num(&c, "max_position_embeddings").unwrap_or(orig) / orig;
                    let attn = if scale > 1.0 {
                        (1.0 + scale.ln() / orig.ln()).sqrt()
                    } else {
                        1.0
                    };
                    put(key("rope.scaling.attn_factor"), Value::F32(attn as f32));
                    put(
                        key("rope.scaling.original_context_length"),
                        Value::U32(orig as u32),
                    );
                }
                "default" | "none" => {}
                other => put(key("rope.scaling.type"), Value::String(other.into())),
            }
        }
        tokenizer_metadata(dir, &c, gemma, &mut m)?;
        Ok(Self {
            arch,
            n_heads,
            n_kv_heads,
            head_dim,
            tied: c["tie_word_embeddings"].as_bool().unwrap_or(gemma),
            metadata: m,
            factors,
        })
    }

    /// Tensors the configuration implies (RoPE factors).
    pub fn extra_tensors(&self) -> Vec<(String, Vec<f32>)> {
        self.factors.clone()
    }
}

/// Llama 3's per-pair frequency divisors, computed as llama.cpp's converter does.
fn llama3_factors(rs: &Json, base: f64, dim: usize) -> Vec<f32> {
    let factor = num(rs, "factor").unwrap_or(8.0);
    let low = num(rs, "low_freq_factor").unwrap_or(1.0);
    let high = num(rs, "high_freq_factor").unwrap_or(4.0);
    let old = num(rs, "original_max_position_embeddings").unwrap_or(8192.0);
    let (low_wavelen, high_wavelen) = (old / low, old / high);
    (0..dim / 2)
        .map(|i| {
            let freq = 1.0 / base.powf((2 * i) as f64 / dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            (if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }) as f32
        })
        .collect()
}

/// BOS/EOS ids, whether a BOS starts a prompt, and the chat template, from
/// `tokenizer_config.json` and `config.json`.
fn tokenizer_metadata(
    dir: &Path,
    c: &Json,
    gemma: bool,
    m: &mut HashMap<String, Value>,
) -> Result<(), ModelError> {
    let tc_path = dir.join("tokenizer_config.json");
    let tc = if tc_path.exists() {
        read_json(&tc_path)?
    } else {
        Json::Null
    };
    let tj_path = dir.join("tokenizer.json");
    let tj = if tj_path.exists() {
        read_json(&tj_path)?
    } else {
        Json::Null
    };
    let first = |v: &Json| v.as_u64().or_else(|| v.as_array()?.first()?.as_u64());
    let bos = first(&c["bos_token_id"])
        .map(|v| v as u32)
        .or_else(|| token_id(&tj, &tc["bos_token"]));
    let eos = first(&c["eos_token_id"])
        .map(|v| v as u32)
        .or_else(|| token_id(&tj, &tc["eos_token"]));
    if let Some(b) = bos {
        m.insert("tokenizer.ggml.bos_token_id".into(), Value::U32(b));
    }
    if let Some(e) = eos {
        m.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(e));
    }
    let add_bos = tc["add_bos_token"].as_bool().unwrap_or(gemma);
    m.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(add_bos));
    let template = match &tc["chat_template"] {
        Json::String(s) => Some(s.clone()),
        Json::Array(list) => list
            .iter()
            .find(|t| t["name"].as_str() == Some("default"))
            .and_then(|t| t["template"].as_str())
            .map(str::to_string),
        _ => None,
    };
    let template =
        template.or_else(|| std::fs::read_to_string(dir.join("chat_template.jinja")).ok());
    if let Some(t) = template {
        m.insert("tokenizer.chat_template".into(), Value::String(t));
    }
    Ok(())
}
