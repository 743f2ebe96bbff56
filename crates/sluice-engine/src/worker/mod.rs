//! The engine thread: owns the model, the KV cache and the slots, and runs the loop
//! queue -> admission into free slots and blocks (`admit.rs`) -> one planned step carrying
//! every decoding sequence's row and prompt chunks (`step.rs`), freeing finished or
//! cancelled sequences' blocks between steps (docs/ARCHITECTURE.md, "The engine loop").

mod admit;
mod draft;
mod sample;
mod step;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::cache::KvCache;
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::metrics::Metrics;
use crate::model::Model;
use crate::protocol::{Command, EventSender, Queued, Shared};
use crate::reload::{ReloadMode, Swap, Swapped};
use crate::request::Event;
use crate::sequence::Sequence;
use crate::slots::SlotPool;
use crate::tokenizer::Tokenizer;

/// The state the engine thread owns.
pub(crate) struct Worker {
    model: Box<dyn Model>,
    tok: Arc<Tokenizer>,
    config: EngineConfig,
    shared: Arc<Shared>,
    /// The KV pool, its block tables and the prefix cache (their one owner), shared with
    /// the slot leases, which let go of their blocks when dropped.
    cache: Rc<RefCell<KvCache>>,
    pool: SlotPool,
    queue: VecDeque<Queued>,
    /// Embedding requests, run one between steps.
    embeds: VecDeque<crate::embed::EmbedJob>,
    running: Vec<Sequence>,
    seed_counter: u64,
    metrics: Arc<Metrics>,
    /// A weight swap waiting for its step boundary.
    pending: Option<Swap>,
    /// Label of the weights in use.
    version: Arc<str>,
    /// Steps run so far (the clock of least-recently-used eviction).
    tick: u64,
    /// The logits buffer, reused from step to step (`Model::forward_into`).
    logits: Vec<f32>,
    /// The draft model, when speculation drafts with one (`--draft-model`).
    draft_model: Option<draft::DraftModel>,
}

impl Worker {
    pub(crate) fn new(
        model: Box<dyn Model>,
        draft_model: Option<Box<dyn Model>>,
        tok: Arc<Tokenizer>,
        config: EngineConfig,
        shared: Arc<Shared>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let c = model.shape();
        let cache = KvCache::new(
            c.n_layers,
            c.n_kv_heads,
            c.head_dim,
            config.slots,
            config.kv_blocks(),
        );
        if config.kv_huge_pages {
            cache.slab.advise_huge_pages();
        }
        let seed_counter = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        shared
            .kv_base
            .store(cache.slab.base_ptr(), Ordering::SeqCst);
        metrics.weights_version.set(1);
        metrics.kv_blocks_total.set(cache.total() as i64);
        metrics.kv_pool_bytes.set(cache.slab.bytes() as i64);
        let mut cache = cache;
        cache.held_gauge = shared.kv_blocks_used.clone();
        cache.peak_gauge = shared.kv_blocks_peak.clone();
        let cache = Rc::new(RefCell::new(cache));
        Self {
            pending: None,
            version: config.weights_version.as_str().into(),
            pool: SlotPool::new(config.slots, cache.clone(), shared.slots_used.clone()),
            tick: 0,
            logits: Vec::new(),
            draft_model: draft_model
                .map(|m| draft::DraftModel::new(m, config.slots, config.context)),
            model,
            tok,
            config,
            shared,
            cache,
            queue: VecDeque::new(),
            embeds: VecDeque::new(),
            running: Vec::new(),
            seed_counter,
            metrics,
        }
    }

    /// Runs until every handle is dropped.
    pub(crate) fn run(mut self, rx: Receiver<Command>) {
        loop {
            if self.queue.is_empty()
                && self.running.is_empty()
                && self.pending.is_none()
                && self.embeds.is_empty()
            {
                match rx.recv() {
                    Ok(cmd) => self.handle(cmd),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(cmd) => self.handle(cmd),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        if self.queue.is_empty() && self.running.is_empty() {
                            return;
                        }
                        break;
                    }
                }
            }
            // One engine at a time on the compute threads (the turn ends with the loop).
            let _turn = crate::turns::take();
            self.drop_cancelled();
            self.apply_swap();
            if self.pending.is_none() {
                self.admit();
            }
            self.step();
            // One embedding request between steps: streams wait for it no longer than
            // for one prefill.
            if let Some(job) = self.embeds.pop_front()
                && !job.reply.is_closed()
            {
                let tokens: usize = job.inputs.iter().map(Vec::len).sum();
                let vectors = crate::embed::embed(
                    self.model.as_ref(),
                    &job.inputs,
                    &job.readout,
                    self.config.max_batch_tokens,
                );
                self.metrics.prompt_tokens_total.inc_by(tokens as u64);
                let _ = job.reply.send(Ok(vectors));
            }
            self.publish();
        }
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Submit(mut q) => {
                if !q.req.seeded {
                    self.seed_counter = self.seed_counter.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    q.req.params.seed = self.seed_counter;
                }
                self.queue.push_back(*q);
            }
            // One swap at a time (the admin API serialises them); a second one is
            // refused by dropping its reply.
            Command::Swap(swap) if self.pending.is_none() => {
                self.shared.swap_pending.store(true, Ordering::SeqCst);
                self.pending = Some(swap);
            }
            Command::Swap(_) => {}
            Command::Embed(job) => self.embeds.push_back(job),
        }
    }

    /// Swaps the weights if a swap is pending and its mode allows it now.
    fn apply_swap(&mut self) {
        let Some(swap) = self.pending.take() else {
            return;
        };
        if swap.mode == ReloadMode::Wait && !self.running.is_empty() {
            self.pending = Some(swap);
            return;
        }
        let t = Instant::now();
        let mut aborted = 0;
        if swap.mode == ReloadMode::Abort {
            for s in self.running.drain(..) {
                end_with_error(
                    &self.metrics,
                    &s.tx,
                    s.req.route,
                    "aborted",
                    EngineError::Aborted,
                );
                aborted += 1;
            }
        }
        let old = std::mem::replace(&mut self.model, swap.model);
        // Keys and values of the old weights are never reused with the new ones.
        self.cache.borrow_mut().invalidate();
        self.version = swap.version.as_str().into();
        *self
            .shared
            .version
            .write()
            .unwrap_or_else(|e| e.into_inner()) = self.version.clone();
        self.metrics.weights_version.inc();
        let report = Swapped {
            old,
            pause: t.elapsed(),
            waited: swap.requested.elapsed(),
            aborted,
        };
        self.shared.swap_pending.store(false, Ordering::SeqCst);
        // If the requester has gone, the old weights are dropped here.
        let _ = swap.reply.send(report);
    }

    /// Cancellation by drop: queued requests whose client left never reach prefill, and
    /// running ones give their slot back now. Requests past the deadline end with an error.
    fn drop_cancelled(&mut self) {
        let m = &self.metrics;
        let timeout = self.config.request_timeout;
        let late = |since: Instant| timeout.is_some_and(|t| since.elapsed() > t);
        let secs = timeout.map_or(0.0, |t| t.as_secs_f64());
        let keep = |tx: &EventSender, submitted: Instant, route| {
            let gone = tx.is_closed();
            let expired = !gone && late(submitted);
            if gone {
                m.requests.with_label_values(&[route, "cancelled"]).inc();
            } else if expired {
                end_with_error(m, tx, route, "timeout", EngineError::TimedOut(secs));
            }
            !(gone || expired)
        };
        // Dropping a queued entry drops its queue permit, which releases the counters.
        self.queue.retain(|q| keep(&q.tx, q.submitted, q.req.route));
        self.running
            .retain(|s| keep(&s.tx, s.submitted, s.req.route));
    }

    /// Ends `s` with a grammar error.
    fn fail(&self, s: Sequence, why: String) {
        end_with_error(
            &self.metrics,
            &s.tx,
            s.req.route,
            "grammar_error",
            EngineError::Grammar(why),
        );
    }

    fn publish(&self) {
        self.shared
            .running
            .store(self.running.len(), Ordering::SeqCst);
        let m = &self.metrics;
        m.running.set(self.running.len() as i64);
        m.waiting
            .set(self.shared.waiting.load(Ordering::SeqCst) as i64);
        m.slots_used.set(self.pool.used() as i64);
        let c = self.cache.borrow();
        m.kv_usage.set(c.used() as f64 / c.total().max(1) as f64);
        m.kv_blocks_used.set(c.used() as i64);
        m.kv_blocks_cached.set(c.cached() as i64);
        m.kv_evictions.inc_by(c.evictions() - m.kv_evictions.get());
    }
}

/// Ends a request with `err`, counted under `reason` first: a client that has seen its
/// request end then finds it in the metrics (as `Sequence::finish` counts before its
/// final event).
fn end_with_error(
    m: &Metrics,
    tx: &EventSender,
    route: &'static str,
    reason: &str,
    err: EngineError,
) {
    m.requests.with_label_values(&[route, reason]).inc();
    tx.send(Event::Error(err));
}
