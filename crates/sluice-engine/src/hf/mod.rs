//! Hugging Face model folders (`config.json`, `tokenizer.json`, `tokenizer_config.json`,
//! `*.safetensors`): converted in memory into the form a GGUF file has (the metadata keys
//! and tensor names llama.cpp's converter writes), then loaded by the same architecture
//! code. Weight matrices are quantised at load time (`--quantize`) so the integer
//! kernels serve them (docs/ARCHITECTURE.md, "Model files").

mod config;
mod names;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::Value;
use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

use crate::error::ModelError;
use crate::gguf::GgufFile;

/// What weight matrices of a Hugging Face folder become at load time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Quantize {
    /// 8-bit blocks of 32 (the default: close to the original, fast kernels).
    #[default]
    Q8_0,
    /// 4-bit blocks of 32.
    Q4_0,
    /// 4-bit K-quant super-blocks of 256 (matrices whose rows do not divide fall back to
    /// Q8_0).
    Q4K,
    /// As stored (F32, F16 or BF16).
    None,
}

impl Quantize {
    /// Parses `q8_0`, `q4_0`, `q4_k` or `none`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "q8_0" => Self::Q8_0,
            "q4_0" => Self::Q4_0,
            "q4_k" => Self::Q4K,
            "none" => Self::None,
            _ => return None,
        })
    }
}

/// Why a folder cannot be read.
fn bad(dir: &Path, reason: impl Into<String>) -> ModelError {
    ModelError::NotGguf {
        path: dir.to_path_buf(),
        reason: reason.into(),
    }
}

/// The safetensors files of `dir`: the index's shards, else every `*.safetensors`.
fn shards(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let index = dir.join("model.safetensors.index.json");
    let mut files: Vec<PathBuf> = if index.exists() {
        let v = config::read_json(&index)?;
        let map = v["weight_map"]
            .as_object()
            .ok_or_else(|| bad(dir, "model.safetensors.index.json has no weight_map"))?;
        let mut f: Vec<PathBuf> = map
            .values()
            .filter_map(|s| s.as_str())
            .map(|s| dir.join(s))
            .collect();
        f.sort();
        f.dedup();
        f
    } else {
        let mut f: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|reason| ModelError::Open {
                path: dir.to_path_buf(),
                reason,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        f.sort();
        f
    };
    files.retain(|p| !p.is_dir());
    if files.is_empty() {
        return Err(bad(dir, "no *.safetensors weights in the folder"));
    }
    Ok(files)
}

/// A tensor's values as f32, and the type it was stored in.
fn to_f32(name: &str, dtype: Dtype, data: &[u8]) -> Result<(Vec<f32>, GgmlDType), String> {
    Ok(match dtype {
        Dtype::F32 => (
            data.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            GgmlDType::F32,
        ),
        Dtype::F16 => (
            data.chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            GgmlDType::F16,
        ),
        Dtype::BF16 => (
            data.chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            GgmlDType::BF16,
        ),
        other => {
            return Err(format!(
                "tensor `{name}` has type {other:?}; sluice reads F32, F16 and BF16"
            ));
        }
    })
}

/// Converts the folder `dir` into an in-memory model file.
pub fn open(dir: &Path, quantize: Quantize) -> Result<GgufFile, ModelError> {
    let cfg = config::Config::read(dir)?;
    let mut metadata: HashMap<String, Value> = cfg.metadata.clone();
    // Each tensor is converted and quantised as soon as it is read, so the peak memory is
    // one shard's bytes plus one tensor in f32, not the whole model in f32.
    let mut out = Vec::new();
    let mut add = |name: String, shape: Vec<usize>, values: Vec<f32>, stored: GgmlDType| {
        let cols = *shape.last().unwrap_or(&1);
        let target = if shape.len() == 2 {
            pick(quantize, stored, cols)
        } else {
            GgmlDType::F32
        };
        let bytes = sluice_kernels::quantize(target, &values, cols).map_err(|source| {
            ModelError::Tensor {
                name: name.clone(),
                source,
            }
        })?;
        out.push((name, target, shape, bytes));
        Ok::<(), ModelError>(())
    };
    for path in shards(dir)? {
        let bytes = std::fs::read(&path).map_err(|reason| ModelError::Open {
            path: path.clone(),
            reason,
        })?;
        let st = SafeTensors::deserialize(&bytes)
            .map_err(|e| bad(&path, format!("not a safetensors file: {e}")))?;
        for (hf_name, view) in st.tensors() {
            let Some(name) = names::gguf_name(&cfg, &hf_name) else {
                continue;
            };
            let (mut values, stored) =
                to_f32(&hf_name, view.dtype(), view.data()).map_err(|r| bad(&path, r))?;
            let shape = view.shape().to_vec();
            names::transform(&cfg, &name, &shape, &mut values);
            add(name, shape, values, stored)?;
        }
    }
    for (name, values) in cfg.extra_tensors() {
        let n = values.len();
        add(name, vec![n], values, GgmlDType::F32)?;
    }
    metadata.insert(
        "general.file_type".into(),
        Value::U32(match quantize {
            Quantize::Q8_0 => 7,
            Quantize::Q4_0 => 2,
            Quantize::Q4K => 15,
            Quantize::None => 0,
        }),
    );
    Ok(GgufFile::from_parts(dir, metadata, out))
}

/// The type a `cols`-wide matrix becomes: the asked format when its blocks divide the
/// rows, else Q8_0, else as stored.
fn pick(q: Quantize, stored: GgmlDType, cols: usize) -> GgmlDType {
    let want = match q {
        Quantize::Q8_0 => GgmlDType::Q8_0,
        Quantize::Q4_0 => GgmlDType::Q4_0,
        Quantize::Q4K => GgmlDType::Q4K,
        Quantize::None => return stored,
    };
    [want, GgmlDType::Q8_0]
        .into_iter()
        .find(|t| cols.is_multiple_of(t.block_size()))
        .unwrap_or(stored)
}
