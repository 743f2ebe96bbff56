//! The models a server offers, and which of them are loaded (docs/ARCHITECTURE.md,
//! "Several models"). A request names its model; [`Models::get`] hands back that model's
//! state, loading it first when it is not loaded and waiting while it loads. Loading one
//! more than `--max-loaded-models` first unloads the least recently used model with
//! nothing in flight; when every loaded model is busy, the load waits for one to finish.
//! A model idle for `--model-idle-unload` is unloaded. A model that fails to load stays
//! failed and answers every request for it with its load error.
//!
//! An unloaded model's engine is dropped here only; a request already holding its state
//! keeps it until it ends, and the engine thread finishes its requests before it exits
//! and frees the weights and KV memory.

mod load;

pub use load::{bytes_of, load_model};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use sluice_engine::Metrics;
use tokio::sync::watch;

use crate::api::ModelCard;
use crate::config::{Config, ModelConfig};
use crate::error::{ApiError, HttpError};
use crate::http::{AppState, Common};
use crate::validation::ValidationError;

/// How often a load waiting for a busy model to finish looks again.
const RECHECK: Duration = Duration::from_millis(10);

/// Where a model is in its life, as `/v1/models` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not in memory; the next request for it loads it.
    Unloaded,
    /// Being loaded; requests for it wait.
    Loading,
    /// Serving.
    Loaded,
    /// Its load failed; requests for it get the load error.
    Failed,
}

impl Status {
    /// The name clients see.
    pub fn name(self) -> &'static str {
        match self {
            Status::Unloaded => "unloaded",
            Status::Loading => "loading",
            Status::Loaded => "loaded",
            Status::Failed => "failed",
        }
    }
}

/// One model offered: its configuration and its metrics (kept across loads, so that its
/// counters never go back).
struct Entry {
    config: Mutex<ModelConfig>,
    metrics: OnceLock<Arc<Metrics>>,
    /// Requests holding this model's state now (between routing and submitting, and
    /// while an embedding or rerank request runs).
    leases: Arc<AtomicUsize>,
    /// Its card as last seen loaded (`/v1/models` lists what it learnt).
    card: Mutex<Option<ModelCard>>,
}

enum Slot {
    Unloaded,
    Loading,
    Loaded {
        state: Box<AppState>,
        last_used: Instant,
    },
    Failed(String),
}

/// A request's hold on a model: the model is not unloaded while one is held.
pub struct Lease(Arc<AtomicUsize>);

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Every model offered, the default one first.
pub struct Models {
    entries: Vec<Entry>,
    slots: Mutex<Vec<Slot>>,
    /// Bumped whenever a slot changes: waiting requests look again.
    changed: watch::Sender<u64>,
    config: Config,
    common: Common,
}

impl Models {
    /// The models of `config`, none loaded yet.
    pub fn new(config: &Config, common: Common) -> Self {
        Self {
            entries: config
                .models
                .iter()
                .map(|m| Entry {
                    config: Mutex::new(m.clone()),
                    metrics: OnceLock::new(),
                    leases: Arc::default(),
                    card: Mutex::new(None),
                })
                .collect(),
            slots: Mutex::new(config.models.iter().map(|_| Slot::Unloaded).collect()),
            changed: watch::Sender::new(0),
            config: config.clone(),
            common,
        }
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn index(&self, id: &str) -> Option<usize> {
        self.entries.iter().position(|e| lock(&e.config).name == id)
    }

    /// The ids of every model, the default first.
    pub fn ids(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| lock(&e.config).name.clone())
            .collect()
    }

    /// A model's configuration (its path follows admin reloads).
    pub fn config_of(&self, id: &str) -> Option<ModelConfig> {
        self.index(id)
            .map(|i| lock(&self.entries[i].config).clone())
    }

    /// Each model's status and, when loaded, its state.
    pub fn statuses(&self) -> Vec<(ModelConfig, Status, Option<AppState>)> {
        let slots = self.slots();
        self.entries
            .iter()
            .zip(slots.iter())
            .map(|(e, s)| {
                let (status, state) = match s {
                    Slot::Unloaded => (Status::Unloaded, None),
                    Slot::Loading => (Status::Loading, None),
                    Slot::Loaded { state, .. } => (Status::Loaded, Some(AppState::clone(state))),
                    Slot::Failed(_) => (Status::Failed, None),
                };
                (lock(&e.config).clone(), status, state)
            })
            .collect()
    }

    /// Why model `id`'s load failed, if it did.
    pub fn error_of(&self, id: &str) -> Option<String> {
        let i = self.index(id)?;
        match &self.slots()[i] {
            Slot::Failed(e) => Some(e.clone()),
            _ => None,
        }
    }

    /// Keeps model `id`'s card as seen loaded.
    pub fn remember(&self, id: &str, card: &ModelCard) {
        if let Some(i) = self.index(id) {
            *lock(&self.entries[i].card) = Some(card.clone());
        }
    }

    /// Model `id`'s card as last seen loaded.
    pub fn remembered(&self, id: &str) -> Option<ModelCard> {
        lock(&self.entries[self.index(id)?].card).clone()
    }

    /// The metrics of every model loaded at least once.
    pub fn metrics(&self) -> Vec<Arc<Metrics>> {
        self.entries
            .iter()
            .filter_map(|e| e.metrics.get().cloned())
            .collect()
    }

    /// The default model's state when it is loaded.
    pub fn default_loaded(&self) -> Option<AppState> {
        match &self.slots()[0] {
            Slot::Loaded { state, .. } => Some(AppState::clone(state)),
            _ => None,
        }
    }

    /// Whether the default model failed to load.
    pub fn default_failed(&self) -> bool {
        matches!(self.slots()[0], Slot::Failed(_))
    }

    /// The state of model `id` (the default model when `None`), loading it first if it
    /// is not loaded. Unknown ids get 404 `model_not_found`; a failed model its load
    /// error; a model that cannot be loaded within the request timeout 503.
    pub async fn get(self: &Arc<Self>, id: Option<&str>) -> Result<AppState, ApiError> {
        let i = match id {
            None => 0,
            Some(id) => self
                .index(id)
                .ok_or_else(|| ValidationError::ModelNotFound(id.to_string()))?,
        };
        let deadline = self
            .config
            .engine
            .request_timeout
            .map(|t| Instant::now() + t);
        let mut changed = self.changed.subscribe();
        loop {
            let waiting_for = {
                let mut slots = self.slots();
                match &mut slots[i] {
                    Slot::Loaded { state, last_used } => {
                        *last_used = Instant::now();
                        let leases = &self.entries[i].leases;
                        leases.fetch_add(1, Ordering::SeqCst);
                        let mut state = AppState::clone(state);
                        state.lease = Some(Arc::new(Lease(leases.clone())));
                        return Ok(state);
                    }
                    Slot::Failed(error) => {
                        return Err(HttpError::ModelFailed {
                            model: self.name(i),
                            error: error.clone(),
                        }
                        .into());
                    }
                    Slot::Loading => "it was still loading",
                    Slot::Unloaded => match self.make_room(&mut slots) {
                        true => {
                            slots[i] = Slot::Loading;
                            self.bump();
                            self.spawn_load(i);
                            "it was still loading"
                        }
                        false => "every loaded model stayed busy",
                    },
                }
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(HttpError::ModelWait(self.name(i), waiting_for).into());
            }
            let _ = tokio::time::timeout(RECHECK, changed.changed()).await;
        }
    }

    fn name(&self, i: usize) -> String {
        lock(&self.entries[i].config).name.clone()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Whether one more model may start loading, unloading the least recently used idle
    /// model if the limit requires it.
    fn make_room(&self, slots: &mut [Slot]) -> bool {
        let max = self.config.max_loaded;
        let held = slots
            .iter()
            .filter(|s| matches!(s, Slot::Loaded { .. } | Slot::Loading))
            .count();
        if max == 0 || held < max {
            return true;
        }
        let victim = slots
            .iter()
            .enumerate()
            .filter_map(|(j, s)| match s {
                Slot::Loaded { state, last_used } if self.idle(j, state) => Some((j, *last_used)),
                _ => None,
            })
            .min_by_key(|&(_, t)| t);
        match victim {
            Some((j, _)) => {
                tracing::info!(model = %self.name(j), "unloading the least recently used model");
                slots[j] = Slot::Unloaded;
                true
            }
            None => false,
        }
    }

    /// Whether model `j` has nothing in flight and no request holds it.
    fn idle(&self, j: usize, state: &AppState) -> bool {
        self.entries[j].leases.load(Ordering::SeqCst) == 0 && state.engine.in_flight() == 0
    }

    /// Loads model `i` on the blocking pool; its slot becomes loaded or failed.
    fn spawn_load(self: &Arc<Self>, i: usize) {
        let models = self.clone();
        tokio::task::spawn_blocking(move || {
            let result = models.load_now(i);
            let mut slots = models.slots();
            slots[i] = match result {
                Ok(state) => Slot::Loaded {
                    state: Box::new(state),
                    last_used: Instant::now(),
                },
                Err(e) => Slot::Failed(e),
            };
            drop(slots);
            models.bump();
        });
    }

    /// Loads model `i` here and now (its slot is not touched).
    fn load_now(&self, i: usize) -> Result<AppState, String> {
        let entry = &self.entries[i];
        let model = lock(&entry.config).clone();
        let metrics = entry
            .metrics
            .get_or_init(|| Arc::new(Metrics::new(self.config.engine.slots, &model.name)))
            .clone();
        let t = Instant::now();
        match load::start(&self.config, &model, metrics, &self.common) {
            Ok(state) => {
                tracing::info!(model = %model.name, seconds = t.elapsed().as_secs_f64(), "model loaded and warm");
                Ok(state)
            }
            Err(e) => {
                let error = format!("{e:#}");
                tracing::error!(model = %model.name, error, "the model could not be loaded");
                Err(error)
            }
        }
    }

    /// Loads the models loaded at start (each `--model` and the default, at most
    /// `--max-loaded-models` of them), in order; the first failure is returned.
    pub fn preload(&self) -> anyhow::Result<()> {
        let max = match self.config.max_loaded {
            0 => usize::MAX,
            m => m,
        };
        for (i, e) in self.entries.iter().enumerate().take(max) {
            if !lock(&e.config).preload {
                continue;
            }
            let state = self.load_now(i).map_err(anyhow::Error::msg)?;
            self.slots()[i] = Slot::Loaded {
                state: Box::new(state),
                last_used: Instant::now(),
            };
            self.bump();
        }
        Ok(())
    }

    /// Unloads models idle for `--model-idle-unload`, once a second, while the server runs.
    pub async fn unload_idle(self: Arc<Self>) {
        let Some(limit) = self.config.idle_unload else {
            return;
        };
        loop {
            tokio::time::sleep(Duration::from_secs(1).min(limit)).await;
            let mut slots = self.slots();
            let mut unloaded = false;
            for j in 0..slots.len() {
                if let Slot::Loaded { state, last_used } = &mut slots[j] {
                    if !self.idle(j, state) {
                        // Idle time counts from the end of the last request.
                        *last_used = Instant::now();
                    } else if last_used.elapsed() >= limit {
                        tracing::info!(model = %self.name(j), "unloading an idle model");
                        slots[j] = Slot::Unloaded;
                        unloaded = true;
                    }
                }
            }
            drop(slots);
            if unloaded {
                self.bump();
            }
        }
    }

    /// Resolves once no loaded model has a request in flight.
    pub async fn idle_all(&self) {
        let loaded: Vec<AppState> = self
            .statuses()
            .into_iter()
            .filter_map(|(_, _, s)| s)
            .collect();
        for s in loaded {
            s.engine.idle().await;
        }
    }

    /// Records that model `id` now serves the weights of `path` (an admin reload): a
    /// later load of it reads them.
    pub fn moved(&self, id: &str, path: std::path::PathBuf) {
        if let Some(i) = self.index(id) {
            lock(&self.entries[i].config).path = path;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
