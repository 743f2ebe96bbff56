//! The engine's public face: start the worker thread, submit requests, watch its state.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::model::{Model, Weights};
use super::reload::{ReloadMode, Swap, Swapped};
use super::request::{Event, ValidRequest};
use super::worker::Worker;
use crate::metrics::Metrics;
use crate::tokenizer::Tokenizer;

/// Engine sizing and policy.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Concurrent sequences (KV slab rows).
    pub slots: usize,
    /// Positions per slot: prompt + generated tokens of one sequence.
    pub context: usize,
    /// Smallest prompt bucket.
    pub min_bucket: usize,
    /// Token budget of one prefill batch (bucket x rows).
    pub max_prefill_tokens: usize,
    /// Requests allowed to wait for a slot; beyond it submissions are refused.
    pub max_queued: usize,
    /// Prompt tokens allowed to wait in the queue (0: no budget).
    pub max_queued_tokens: usize,
    /// Longest prompt in tokens (0: the context).
    pub max_prompt_tokens: usize,
    /// Largest `max_tokens` (0: the context).
    pub max_new_tokens: usize,
    /// Whole-request deadline, queue time included (`None`: no deadline).
    pub request_timeout: Option<std::time::Duration>,
    /// Label of the loaded weights (reported as `system_fingerprint`).
    pub weights_version: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            slots: 32,
            context: 2048,
            min_bucket: 16,
            max_prefill_tokens: 4096,
            max_queued: 256,
            max_queued_tokens: 0,
            max_prompt_tokens: 0,
            max_new_tokens: 0,
            request_timeout: None,
            weights_version: "v1".into(),
        }
    }
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is full: retry later.
    #[error("the server is at capacity ({0} requests waiting); retry later")]
    QueueFull(usize),
    /// The queue holds its budget of prompt tokens: retry later.
    #[error("the server is at capacity ({0} prompt tokens waiting); retry later")]
    QueuedTokens(usize),
    /// A configured limit is exceeded.
    #[error("{what} is {got}, above this server's limit of {limit}")]
    Limit {
        /// The request field at fault.
        param: &'static str,
        /// What is limited, in words.
        what: &'static str,
        /// The limit.
        limit: usize,
        /// The request's value.
        got: usize,
    },
    /// prompt + max_tokens does not fit the context.
    #[error(
        "this request needs {prompt} prompt tokens + {max_tokens} max_tokens = {} tokens, \
         more than the context of {context} tokens",
        prompt + max_tokens
    )]
    TooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Requested new tokens.
        max_tokens: usize,
        /// The engine's context.
        context: usize,
    },
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The engine thread is gone.
    #[error("the engine is not running")]
    EngineDown,
}

impl SubmitError {
    /// Label for `sluice_requests_rejected_total{reason}`.
    pub fn reason(&self) -> &'static str {
        match self {
            SubmitError::QueueFull(_) => "queue_full",
            SubmitError::QueuedTokens(_) => "queued_tokens",
            SubmitError::Limit { .. } => "limit",
            SubmitError::TooLong { .. } => "context_length",
            SubmitError::EmptyPrompt => "empty_prompt",
            SubmitError::EngineDown => "engine_down",
        }
    }
}

/// Work sent to the engine thread.
pub(crate) enum Command {
    Submit {
        req: ValidRequest,
        tx: mpsc::Sender<Event>,
        submitted: Instant,
    },
    Swap(Swap),
}

/// Counters shared between the handle and the worker.
#[derive(Default)]
pub(crate) struct Shared {
    pub waiting: AtomicUsize,
    pub running: AtomicUsize,
    pub alive: AtomicBool,
    pub prefill_tokens: AtomicUsize,
    pub padding_tokens: AtomicUsize,
    /// Prompt tokens of the waiting requests.
    pub queued_tokens: AtomicUsize,
    /// Label of the weights in use.
    pub version: RwLock<Arc<str>>,
    /// Address of the KV slab (unchanged for the engine's lifetime).
    pub kv_base: AtomicUsize,
}

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
    pub fn start(model: Model, tokenizer: Arc<Tokenizer>, config: EngineConfig) -> EngineHandle {
        let metrics = Arc::new(Metrics::new(config.slots, "model"));
        Self::start_with_metrics(model, tokenizer, config, metrics)
    }

    /// Starts the engine thread on `model`, reporting to `metrics`.
    pub fn start_with_metrics(
        model: Model,
        tokenizer: Arc<Tokenizer>,
        config: EngineConfig,
        metrics: Arc<Metrics>,
    ) -> EngineHandle {
        let (tx, rx) = sync_channel(config.max_queued.max(1));
        let shared = Arc::new(Shared::default());
        shared.alive.store(true, Ordering::SeqCst);
        *shared.version.write().expect("version lock") = config.weights_version.as_str().into();
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
                Worker::new(model, tokenizer, config, shared, metrics).run(rx);
                drop(alive);
            })
            .expect("spawning the engine thread");
        handle
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Label of the weights in use now (`system_fingerprint`).
    pub fn weights_version(&self) -> Arc<str> {
        self.shared.version.read().expect("version lock").clone()
    }

    /// Address of the KV slab: the same for the engine's lifetime (reloads included).
    pub fn kv_base(&self) -> usize {
        self.shared.kv_base.load(Ordering::SeqCst)
    }

    /// Hands new weights (already checked against the running model) to the engine, to be
    /// swapped in at a step boundary according to `mode`. The reply comes once swapped.
    pub fn reload(
        &self,
        weights: Weights,
        version: String,
        mode: ReloadMode,
    ) -> Result<oneshot::Receiver<Swapped>, SubmitError> {
        let (reply, rx) = oneshot::channel();
        let swap = Swap {
            weights,
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
        if req.prompt.is_empty() {
            return Err(SubmitError::EmptyPrompt);
        }
        let context = self.config.context;
        let cap = |v: usize| if v == 0 { context } else { v };
        let max_prompt = cap(self.config.max_prompt_tokens);
        if req.prompt.len() > max_prompt {
            return Err(SubmitError::Limit {
                param: "prompt",
                what: "the prompt's length in tokens",
                limit: max_prompt,
                got: req.prompt.len(),
            });
        }
        let max_new = cap(self.config.max_new_tokens);
        if req.max_tokens > max_new {
            return Err(SubmitError::Limit {
                param: "max_tokens",
                what: "max_tokens",
                limit: max_new,
                got: req.max_tokens,
            });
        }
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
        let max = self.config.max_queued;
        if self
            .shared
            .waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w < max).then_some(w + 1)
            })
            .is_err()
        {
            return Err(SubmitError::QueueFull(max));
        }
        let budget = self.config.max_queued_tokens;
        let len = req.prompt.len();
        if budget > 0
            && self
                .shared
                .queued_tokens
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |q| {
                    (q + len <= budget).then_some(q + len)
                })
                .is_err()
        {
            self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::QueuedTokens(budget));
        }
        if budget == 0 {
            self.shared.queued_tokens.fetch_add(len, Ordering::SeqCst);
        }
        // Room for every token, the final event and an error: sends never block the engine.
        let (tx, rx) = mpsc::channel(req.max_tokens + 2);
        let cmd = Command::Submit {
            req,
            tx,
            submitted: Instant::now(),
        };
        match self.tx.try_send(cmd) {
            Ok(()) => Ok(rx),
            Err(e) => {
                self.shared.waiting.fetch_sub(1, Ordering::SeqCst);
                self.shared.queued_tokens.fetch_sub(len, Ordering::SeqCst);
                Err(match e {
                    TrySendError::Full(_) => SubmitError::QueueFull(max),
                    TrySendError::Disconnected(_) => SubmitError::EngineDown,
                })
            }
        }
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::SeqCst)
    }

    /// Sequences running in slots.
    pub fn running(&self) -> usize {
        self.shared.running.load(Ordering::SeqCst)
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
