//! The engine's public face: start the worker thread, submit requests, watch its state.
//! (docs/ARCHITECTURE.md, "Threads and channels")

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, watch};

use crate::config::EngineConfig;
use crate::embed::{EmbedJob, Pooling, Readout};
use crate::error::SubmitError;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::protocol::{Command, EventSender, QueuePermit, Queued, Shared};
use crate::reload::{ReloadMode, Swap, Swapped};
use crate::request::{Event, ValidRequest};
use crate::tokenizer::Tokenizer;
use crate::worker::Worker;

/// A cheap, cloneable way to reach the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    tx: SyncSender<Command>,
    shared: Arc<Shared>,
    config: Arc<EngineConfig>,
    metrics: Arc<Metrics>,
}

/// The events of one request. Dropping it cancels the request.
pub type EventStream = mpsc::Receiver<Event>;

impl EngineHandle {
    /// Starts the engine thread on `model`, with metrics of its own.
    pub fn start(model: Box<dyn Model>, tokenizer: Arc<Tokenizer>, config: EngineConfig) -> Self {
        let metrics = Arc::new(Metrics::new(config.slots, &model.shape().arch));
        Self::start_with_metrics(model, tokenizer, config, metrics)
    }

    /// Starts the engine thread on `model`, reporting to `metrics`.
    pub fn start_with_metrics(
        model: Box<dyn Model>,
        tokenizer: Arc<Tokenizer>,
        config: EngineConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self::start_with_draft(model, None, tokenizer, config, metrics)
    }

    /// As `start_with_metrics`, speculating with drafts from `draft` (a model with the
    /// same vocabulary, checked by the caller) when given.
    pub fn start_with_draft(
        model: Box<dyn Model>,
        draft: Option<Box<dyn Model>>,
        tokenizer: Arc<Tokenizer>,
        config: EngineConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (tx, rx) = sync_channel(config.max_queued.max(1));
        let shared = Arc::new(Shared {
            waiting: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            alive: AtomicBool::new(true),
            prefill_tokens: AtomicUsize::new(0),
            padding_tokens: AtomicUsize::new(0),
            queued_tokens: AtomicUsize::new(0),
            version: RwLock::new(config.weights_version.as_str().into()),
            kv_base: AtomicUsize::new(0),
            in_flight: watch::Sender::new(0),
            slots_used: Arc::default(),
            kv_blocks_used: Arc::default(),
            kv_blocks_peak: Arc::default(),
            swap_pending: Default::default(),
        });
        let handle = EngineHandle {
            tx,
            shared: shared.clone(),
            config: Arc::new(config.clone()),
            metrics: metrics.clone(),
        };
        std::thread::Builder::new()
            .name("sluice-engine".into())
            .spawn(move || {
                let alive = AliveGuard(shared.clone());
                Worker::new(model, draft, tokenizer, config, shared, metrics).run(rx);
                // The engine has stopped (shutdown, or its model unloaded): its weights and
                // KV pool are dropped.
                sluice_kernels::return_freed_memory();
                drop(alive);
            })
            .expect("the engine thread starts (a failure here is fatal at start-up)");
        handle
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Label of the weights in use now (`system_fingerprint`).
    pub fn weights_version(&self) -> Arc<str> {
        self.shared
            .version
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Address of the KV slab: the same for the engine's lifetime (reloads included).
    pub fn kv_base(&self) -> usize {
        self.shared.kv_base.load(Ordering::SeqCst)
    }

    /// Hands a new model (already checked against the running one) to the engine, to be
    /// swapped in at a step boundary according to `mode`. The reply comes once swapped.
    pub fn reload(
        &self,
        model: Box<dyn Model>,
        version: String,
        mode: ReloadMode,
    ) -> Result<oneshot::Receiver<Swapped>, SubmitError> {
        let (reply, rx) = oneshot::channel();
        let swap = Swap {
            model,
            version,
            mode,
            reply,
            requested: Instant::now(),
        };
        match self.tx.try_send(Command::Swap(swap)) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) => Err(SubmitError::QueueFull(self.config.max_queued)),
            Err(TrySendError::Disconnected(_)) => Err(SubmitError::EngineDown),
        }
    }

    /// The metrics the engine reports to.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Queues a request. Refuses at once when it cannot fit or the queue is full.
    pub fn submit(&self, req: ValidRequest) -> Result<EventStream, SubmitError> {
        let r = self.try_submit(req);
        if let Err(e) = &r {
            self.metrics.rejected.with_label_values(&[e.reason()]).inc();
        }
        r
    }

    fn try_submit(&self, req: ValidRequest) -> Result<EventStream, SubmitError> {
        if req.prompt.is_empty() || (req.max_tokens == 0 && req.prompt_logprobs.is_none()) {
            return Err(SubmitError::Empty);
        }
        let context = self.config.context;
        if req.prompt.len() + req.max_tokens > context {
            return Err(SubmitError::TooLong {
                prompt: req.prompt.len(),
                max_tokens: req.max_tokens,
                context,
            });
        }
        if !self.is_alive() {
            return Err(SubmitError::EngineDown);
        }
        let permit = self.permit(req.prompt.len())?;
        // Room for every token, the final event and an error: sends never block the engine.
        let (tx, rx) = mpsc::channel(req.max_tokens + 3);
        self.shared.in_flight.send_modify(|n| *n += 1);
        let tx = EventSender {
            tx,
            shared: self.shared.clone(),
        };
        let cmd = Command::Submit(Box::new(Queued {
            permit,
            req,
            tx,
            submitted: Instant::now(),
        }));
        match self.tx.try_send(cmd) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) => Err(SubmitError::QueueFull(self.config.max_queued)),
            Err(TrySendError::Disconnected(_)) => Err(SubmitError::EngineDown),
        }
    }

    /// A place in the queue for a prompt of `len` tokens, if the limits allow.
    fn permit(&self, len: usize) -> Result<QueuePermit, SubmitError> {
        let max = self.config.max_queued;
        let s = &self.shared;
        s.waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w < max).then_some(w + 1)
            })
            .map_err(|_| SubmitError::QueueFull(max))?;
        let budget = self.config.max_queued_tokens;
        let took = s
            .queued_tokens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| {
                (budget == 0 || q + len <= budget).then_some(q + len)
            });
        if took.is_err() {
            s.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::QueuedTokens(budget));
        }
        Ok(QueuePermit {
            shared: s.clone(),
            tokens: len,
        })
    }

    /// The pooled, unit-length embedding of each input (token ids), computed on the engine
    /// thread between steps (docs/ARCHITECTURE.md, "Embeddings").
    pub async fn embed(
        &self,
        inputs: Vec<Vec<u32>>,
        pooling: Pooling,
    ) -> Result<Vec<Vec<f32>>, SubmitError> {
        self.readout(inputs, Readout::Pool(pooling)).await
    }

    /// The logits of `ids` at the last position of each input (token ids), computed as
    /// `embed` computes embeddings: a reranker's answer.
    pub async fn last_logits(
        &self,
        inputs: Vec<Vec<u32>>,
        ids: Vec<u32>,
    ) -> Result<Vec<Vec<f32>>, SubmitError> {
        self.readout(inputs, Readout::Logits(ids)).await
    }

    /// The classification head's raw outputs at the last position of each input (token
    /// ids), computed as `embed` computes embeddings: a reranker with a head.
    pub async fn classify(
        &self,
        inputs: Vec<Vec<u32>>,
        head: std::sync::Arc<crate::ClassHead>,
    ) -> Result<Vec<Vec<f32>>, SubmitError> {
        self.readout(inputs, Readout::Classify(head)).await
    }

    async fn readout(
        &self,
        inputs: Vec<Vec<u32>>,
        readout: Readout,
    ) -> Result<Vec<Vec<f32>>, SubmitError> {
        let context = self.config.context;
        if inputs.is_empty() || inputs.iter().any(Vec::is_empty) {
            return Err(SubmitError::Empty);
        }
        if let Some(long) = inputs.iter().find(|i| i.len() > context) {
            return Err(SubmitError::TooLong {
                prompt: long.len(),
                max_tokens: 0,
                context,
            });
        }
        if !self.is_alive() {
            return Err(SubmitError::EngineDown);
        }
        let (reply, rx) = tokio::sync::oneshot::channel();
        let job = EmbedJob {
            inputs,
            readout,
            reply,
        };
        match self.tx.try_send(Command::Embed(job)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(SubmitError::QueueFull(self.config.max_queued));
            }
            Err(TrySendError::Disconnected(_)) => return Err(SubmitError::EngineDown),
        }
        match rx.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(_)) | Err(_) => Err(SubmitError::EngineDown),
        }
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::SeqCst)
    }

    /// Whether the engine holds a weight swap not yet applied (from its arrival to the
    /// swap; requests that arrive meanwhile wait for the new weights).
    pub fn swap_pending(&self) -> bool {
        self.shared.swap_pending.load(Ordering::SeqCst)
    }

    /// Slots leased now.
    pub fn slots_used(&self) -> usize {
        self.shared.slots_used.load(Ordering::SeqCst)
    }

    /// KV blocks held by running sequences now: 0 once `idle()` resolves, whatever way
    /// the requests ended (blocks left in the prefix cache are not held).
    pub fn kv_blocks_used(&self) -> usize {
        self.shared.kv_blocks_used.load(Ordering::SeqCst)
    }

    /// The most KV blocks held at once since the engine started.
    pub fn kv_blocks_peak(&self) -> usize {
        self.shared.kv_blocks_peak.load(Ordering::SeqCst)
    }

    /// Sequences running in slots.
    pub fn running(&self) -> usize {
        self.shared.running.load(Ordering::SeqCst)
    }

    /// Resolves once no request is queued or running (at once if none is). The engine
    /// signals it when the last request's channel is dropped: no polling.
    pub async fn idle(&self) {
        let mut rx = self.shared.in_flight.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Requests queued or running now (the count [`EngineHandle::idle`] waits to reach 0).
    pub fn in_flight(&self) -> usize {
        *self.shared.in_flight.borrow()
    }

    /// Real prompt tokens prefilled and padding tokens their bucket shapes carried, so far.
    pub fn prefill_token_counts(&self) -> (usize, usize) {
        (
            self.shared.prefill_tokens.load(Ordering::SeqCst),
            self.shared.padding_tokens.load(Ordering::SeqCst),
        )
    }

    /// Whether the engine thread is still running.
    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }
}

/// Marks the engine dead when its thread ends, by return or by panic.
struct AliveGuard(Arc<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::SeqCst);
    }
}
