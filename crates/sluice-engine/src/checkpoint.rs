//! Checkpoints for weight reload: what a file is (path, size, SHA-256, version) and
//! whether it can replace the running one: same architecture and hyper-parameters, same
//! tensor names, shapes and quantisation types, same tokenizer vocabulary
//! (docs/ARCHITECTURE.md, "Weight reload").

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value;
use sha2::{Digest, Sha256};

use crate::error::ModelError;
use crate::gguf::GgufFile;
use crate::model::{self, Model};

/// A loaded checkpoint, as `GET /admin/weights` reports it.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Label (`system_fingerprint` of the completions it produces).
    pub version: String,
    /// File path.
    pub path: PathBuf,
    /// File size in bytes.
    pub size_bytes: u64,
    /// SHA-256 of the file, hex.
    pub sha256: String,
    /// Unix seconds when it started serving.
    pub loaded_at: u64,
}

/// Everything that must match for a swap without rebuilding the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    /// How a Hugging Face folder was quantised at load (a reload uses the same).
    pub quantize: crate::hf::Quantize,
    config: String,
    tensors: BTreeMap<String, (String, Vec<usize>)>,
    vocab: Vec<String>,
}

impl Signature {
    /// Reads the signature of an open file (its architecture must be supported): the
    /// architecture with every `<arch>.*` hyper-parameter, the tensor directory and the
    /// vocabulary.
    pub fn of(file: &GgufFile, quantize: crate::hf::Quantize) -> Result<Signature, ModelError> {
        let arch = model::architecture(file)?.name();
        let prefix = format!("{arch}.");
        let params: BTreeMap<&str, String> = file
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .map(|(k, v)| (k.as_str(), format!("{v:?}")))
            .collect();
        let params: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let config = format!("{arch} ({})", params.join(", "));
        let tensors = file
            .content
            .tensor_infos
            .iter()
            .map(|(name, t)| {
                let dims = t.shape.dims().to_vec();
                (name.clone(), (format!("{:?}", t.ggml_dtype), dims))
            })
            .collect();
        let vocab = match file.metadata().get("tokenizer.ggml.tokens") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.to_string().map(|s| s.to_string()).unwrap_or_default())
                .collect(),
            _ => Vec::new(),
        };
        Ok(Signature {
            quantize,
            config,
            tensors,
            vocab,
        })
    }

    /// The first difference that makes `new` unable to replace `self`, named.
    pub fn mismatch(&self, new: &Signature) -> Option<String> {
        if self.config != new.config {
            return Some(format!(
                "the running model is {}; the new file is {}",
                self.config, new.config
            ));
        }
        for (name, (dtype, dims)) in &self.tensors {
            match new.tensors.get(name) {
                None => return Some(format!("tensor `{name}` is missing from the new file")),
                Some((d, s)) if d != dtype || s != dims => {
                    return Some(format!(
                        "tensor `{name}` is {dtype} {dims:?} in the running model but {d} {s:?} in the new file"
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some(name) = new.tensors.keys().find(|k| !self.tensors.contains_key(*k)) {
            return Some(format!(
                "tensor `{name}` of the new file is not in the running model"
            ));
        }
        if self.vocab != new.vocab {
            let at = self
                .vocab
                .iter()
                .zip(&new.vocab)
                .position(|(a, b)| a != b)
                .unwrap_or(self.vocab.len().min(new.vocab.len()));
            return Some(format!(
                "the tokenizer vocabulary differs ({} vs {} tokens, first difference at id {at})",
                self.vocab.len(),
                new.vocab.len()
            ));
        }
        None
    }
}

/// Why a checkpoint cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Not found or not readable.
    #[error("{0}")]
    Unreadable(String),
    /// Readable, but not something that can replace the running model.
    #[error("{0}")]
    Incompatible(String),
}

/// Hex SHA-256 and size of a file.
pub fn digest(path: &Path) -> std::io::Result<(String, u64)> {
    // A folder: its files' names and contents, in name order.
    let files = if path.is_dir() {
        let mut f: Vec<_> = std::fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        f.sort();
        f
    } else {
        vec![path.to_path_buf()]
    };
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    for p in &files {
        if path.is_dir() {
            h.update(p.file_name().unwrap_or_default().as_encoded_bytes());
        }
        let mut f = std::fs::File::open(p)?;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            size += n as u64;
            h.update(&buf[..n]);
        }
    }
    let hex = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((hex, size))
}

/// Describes the file `path` as version `version`.
pub fn describe(path: &Path, version: &str) -> std::io::Result<Checkpoint> {
    let (sha256, size_bytes) = digest(path)?;
    Ok(Checkpoint {
        version: version.to_string(),
        path: path.to_path_buf(),
        size_bytes,
        sha256,
        loaded_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    })
}

/// Opens `path`, checks it against the running model's signature and loads it.
pub fn prepare(
    path: &Path,
    running: &Signature,
    version: &str,
) -> Result<(Box<dyn Model>, Checkpoint), CheckpointError> {
    let file = crate::open_model(path, running.quantize).map_err(|e| match e {
        ModelError::Open { .. } => CheckpointError::Unreadable(e.to_string()),
        other => CheckpointError::Incompatible(other.to_string()),
    })?;
    let sig = Signature::of(&file, running.quantize)
        .map_err(|e| CheckpointError::Incompatible(e.to_string()))?;
    if let Some(why) = running.mismatch(&sig) {
        return Err(CheckpointError::Incompatible(why));
    }
    let model = model::load(&file).map_err(|e| CheckpointError::Incompatible(e.to_string()))?;
    let info = describe(path, version).map_err(|e| CheckpointError::Unreadable(e.to_string()))?;
    Ok((model, info))
}

/// Resolves a requested path inside one of `roots` (already canonical): symlinks and `..`
/// are resolved first, so neither can lead outside.
pub fn resolve(roots: &[PathBuf], requested: &str) -> Result<PathBuf, ResolveError> {
    let p = PathBuf::from(requested);
    let canonical = p
        .canonicalize()
        .map_err(|e| ResolveError::Missing(format!("{requested}: {e}")))?;
    if roots.iter().any(|r| canonical.starts_with(r)) {
        Ok(canonical)
    } else {
        Err(ResolveError::Outside(format!(
            "{requested} is outside the model directories ({})",
            roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

/// Why a reload path is refused.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No such file (or unreadable directory on the way).
    #[error("{0}")]
    Missing(String),
    /// Resolves outside every allowed root.
    #[error("{0}")]
    Outside(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_roots() {
        let dir = std::env::temp_dir().join(format!("sluice-roots-{}", std::process::id()));
        let root = dir.join("models");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.gguf"), b"x").unwrap();
        std::fs::write(dir.join("secret.gguf"), b"x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.join("secret.gguf"), root.join("link.gguf")).unwrap();
        let roots = vec![root.canonicalize().unwrap()];
        let ok = |p: &Path| resolve(&roots, p.to_str().unwrap());
        assert!(ok(&root.join("a.gguf")).is_ok());
        assert!(matches!(
            ok(&root.join("../secret.gguf")),
            Err(ResolveError::Outside(_))
        ));
        #[cfg(unix)]
        assert!(matches!(
            ok(&root.join("link.gguf")),
            Err(ResolveError::Outside(_))
        ));
        assert!(matches!(
            ok(&root.join("none.gguf")),
            Err(ResolveError::Missing(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
