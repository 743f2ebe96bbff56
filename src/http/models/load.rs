//! Loading one model: its file, its draft model, its engine with a KV pool of its own,
//! and the handlers' state for it.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use sluice_engine::checkpoint::{self, Signature};
use sluice_engine::{EngineHandle, LoadOptions, Loaded, Metrics, warm_up};

use crate::config::{Config, ModelConfig};
use crate::http::openai::rerank::Reranker;
use crate::http::{self, AppState, Common};

/// Loads a model file: the same call, and so the same error, for `sluice serve` and
/// `sluice generate`.
pub fn load_model(path: &Path, options: &LoadOptions) -> anyhow::Result<Loaded> {
    sluice_engine::load(path, options).with_context(|| {
        let hint = if path == crate::config::default_model_path() {
            " (run scripts/fetch-model to fetch the default model)"
        } else {
            ""
        };
        format!("loading {}{hint}", path.display())
    })
}

/// Loads `m`, starts its engine (reporting to `metrics`) and builds its state.
pub fn start(
    config: &Config,
    m: &ModelConfig,
    metrics: Arc<Metrics>,
    common: &Common,
) -> anyhow::Result<AppState> {
    let Loaded {
        model,
        tokenizer,
        file,
    } = load_model(&m.path, &m.load)?;
    let mut config = config.clone();
    config.fit_to_model(model.shape().train_context);
    let config = &config;
    tracing::info!(
        model = %m.name,
        context = config.engine.context,
        kv_cache_tokens = config.engine.kv_tokens(),
        slots = config.engine.slots,
        "KV pool"
    );
    warm_up(&*model);
    let draft = match &m.draft {
        Some(path) => Some(load_draft(path, &m.load, &*model, &tokenizer)?),
        None => None,
    };
    let tokenizer = Arc::new(tokenizer);
    let admin = match &config.admin {
        Some(a) => {
            let current = checkpoint::describe(&m.path, &config.engine.weights_version)
                .with_context(|| format!("reading {}", m.path.display()))?;
            let signature = Signature::of(&file, m.load.quantize)?;
            Some(Arc::new(http::admin::Admin::new(
                &a.reload_dirs,
                current,
                signature,
            )))
        }
        None => None,
    };
    let engine = EngineHandle::start_with_draft(
        model,
        draft,
        tokenizer.clone(),
        config.engine.clone(),
        metrics,
    );
    let mut state = AppState::new(engine, tokenizer, &m.name, config.limits.clone(), common);
    state.tool_parser = config.http.tool_parser;
    state.model_bytes = bytes_of(&m.path);
    let head = sluice_engine::ClassHead::of_file(&file).context("the classification head")?;
    state.rerank = match (head, config.http.rerank) {
        (Some(head), _) => Some(Reranker::Head(Arc::new(head))),
        (None, false) => None,
        (None, true) => match (state.tokenizer.id("yes"), state.tokenizer.id("no")) {
            (Some(yes), Some(no)) => Some(Reranker::YesNo { yes, no }),
            _ => anyhow::bail!("--rerank: the vocabulary has no `yes` and `no` tokens"),
        },
    };
    state.pooling = config
        .http
        .pooling
        .or_else(|| sluice_engine::Pooling::of_file(&file));
    state.admin = admin;
    Ok(state)
}

/// Bytes of a model file, or of the files of a folder (0 if unreadable).
pub fn bytes_of(path: &Path) -> u64 {
    match std::fs::read_dir(path) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum(),
        Err(_) => std::fs::metadata(path).map_or(0, |m| m.len()),
    }
}

/// Loads the draft model at `path` and checks that it speaks the model's vocabulary (the
/// same tokens, byte for byte, in the same order): its drafts are token ids.
fn load_draft(
    path: &Path,
    options: &LoadOptions,
    model: &dyn sluice_engine::Model,
    tokenizer: &sluice_engine::tokenizer::Tokenizer,
) -> anyhow::Result<Box<dyn sluice_engine::Model>> {
    let options = LoadOptions {
        quantize: options.quantize,
        ..Default::default()
    };
    let draft = load_model(path, &options).context("--draft-model")?;
    let (ours, theirs) = (model.shape().vocab, draft.model.shape().vocab);
    if ours != theirs || tokenizer.token_bytes() != draft.tokenizer.token_bytes() {
        anyhow::bail!(
            "--draft-model {}: its vocabulary ({theirs} tokens) is not the model's ({ours} \
             tokens): a draft model must share the model's tokenizer",
            path.display()
        );
    }
    tracing::info!(path = %path.display(), "draft model");
    warm_up(&*draft.model);
    Ok(draft.model)
}
