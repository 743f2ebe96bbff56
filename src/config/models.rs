//! Which models a server offers: each `--model [ID=]PATH` (the first is the default one,
//! and all of them are loaded at start), then every GGUF file and Hugging Face folder in
//! `--models-dir`, loaded on the first request that names it (docs/ARCHITECTURE.md,
//! "Several models").

use std::path::{Path, PathBuf};

use super::checks::ConfigError;
use super::sections::ModelConfig;
use super::{ServeArgs, default_model_path};

/// A model's id from its path: the file name without `.gguf`, or the folder's name.
pub fn id_of(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    name.strip_suffix(".gguf").unwrap_or(&name).to_string()
}

/// Splits `ID=PATH`; a spec that names an existing file, or has no `=`, is a path alone.
fn split(spec: &str) -> (Option<&str>, &str) {
    if Path::new(spec).exists() {
        return (None, spec);
    }
    match spec.split_once('=') {
        Some((id, path)) if !id.is_empty() => (Some(id), path),
        _ => (None, spec),
    }
}

/// Whether clients can name a model `id`: 1-128 visible ASCII characters.
fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.chars().all(|c| c.is_ascii_graphic())
}

/// The GGUF files and Hugging Face folders (those with a `config.json`) of `dir`, by name.
fn scan(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        flag: "models-dir",
        reason,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| invalid(format!("{}: {e}", dir.display())))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            (p.is_file() && p.extension().is_some_and(|e| e == "gguf"))
                || (p.is_dir() && p.join("config.json").is_file())
        })
        .collect();
    found.sort();
    Ok(found)
}

impl ServeArgs {
    /// Every model offered, the default first; `base` carries the options all share.
    pub(super) fn models(&self, base: &ModelConfig) -> Result<Vec<ModelConfig>, ConfigError> {
        let mut models: Vec<ModelConfig> = Vec::new();
        let specs = self.model.iter().filter(|s| !s.is_empty());
        for (i, spec) in specs.enumerate() {
            let (id, path) = split(spec);
            let path = PathBuf::from(path);
            let id = match (id, &self.served_model_name) {
                (Some(id), _) => id.to_string(),
                (None, Some(name)) if i == 0 => name.clone(),
                (None, _) => id_of(&path),
            };
            models.push(ModelConfig {
                path,
                name: id,
                preload: true,
                draft: if i == 0 { base.draft.clone() } else { None },
                ..base.clone()
            });
        }
        if let Some(dir) = &self.models_dir {
            for path in scan(dir)? {
                let id = id_of(&path);
                if models.iter().any(|m| m.name == id || m.path == path) {
                    continue;
                }
                let first = models.is_empty();
                models.push(ModelConfig {
                    path,
                    name: id,
                    // The default model is loaded at start, wherever it comes from.
                    preload: first,
                    draft: if first { base.draft.clone() } else { None },
                    ..base.clone()
                });
            }
            if models.is_empty() {
                return Err(ConfigError::Invalid {
                    flag: "models-dir",
                    reason: format!(
                        "{} holds no GGUF file and no Hugging Face folder (one with a \
                         config.json), and no --model is given",
                        dir.display()
                    ),
                });
            }
        }
        if models.is_empty() {
            let path = default_model_path();
            models.push(ModelConfig {
                name: self
                    .served_model_name
                    .clone()
                    .unwrap_or_else(|| id_of(&path)),
                path,
                preload: true,
                ..base.clone()
            });
        }
        for (i, m) in models.iter().enumerate() {
            if !valid_id(&m.name) {
                return Err(ConfigError::Invalid {
                    flag: "model",
                    reason: format!("`{}`: an id is 1-128 visible ASCII characters", m.name),
                });
            }
            if models[..i].iter().any(|o| o.name == m.name) {
                return Err(ConfigError::Invalid {
                    flag: "model",
                    reason: format!(
                        "two models are named `{}`: name them with --model ID=PATH",
                        m.name
                    ),
                });
            }
        }
        Ok(models)
    }
}
