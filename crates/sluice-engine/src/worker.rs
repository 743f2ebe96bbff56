//! The engine thread: owns the model, the KV slab and the slots, and runs the loop
//! queue -> bucketed prefill into free slots -> one decode step for every active slot,
//! freeing finished or cancelled slots between steps (docs/ARCHITECTURE.md, "The engine
//! loop").

use std::collections::VecDeque;

use rayon::prelude::*;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::constraint::{Guide, SimpleVob};
use crate::handle::{Command, EngineConfig, Queued, Shared};
use crate::kv::KvSlab;
use crate::metrics::Metrics;
use crate::model::{Model, TokenRow};
use crate::reload::{ReloadMode, Swap, Swapped};
use crate::request::{EngineError, Event};
use crate::sampling::{History, Sampled, SamplingParams, sample_with};
use crate::scheduler::{Buckets, Waiting, plan};
use crate::sequence::{Progress, Sequence};
use crate::slots::SlotPool;
use crate::tokenizer::Tokenizer;

/// One sequence's sampling inputs, borrowed for the parallel pass of `sample_into`.
struct Job<'a> {
    row: &'a [f32],
    /// The parameters with end tokens forbidden, before `min_tokens`.
    banned: Option<SamplingParams>,
    params: &'a SamplingParams,
    history: &'a History,
    step: u64,
    n_top: usize,
    mask: Option<SimpleVob>,
}

impl Job<'_> {
    fn run(&self) -> Sampled {
        let params = self.banned.as_ref().unwrap_or(self.params);
        sample_with(
            self.row,
            params,
            self.history,
            self.step,
            self.n_top,
            |work| {
                if let Some(m) = &self.mask {
                    crate::constraint::apply(m, work);
                }
            },
        )
    }
}

/// The state the engine thread owns.
pub(crate) struct Worker {
    model: Box<dyn Model>,
    tok: Arc<Tokenizer>,
    config: EngineConfig,
    shared: Arc<Shared>,
    kv: KvSlab,
    pool: SlotPool,
    queue: VecDeque<Queued>,
    running: Vec<Sequence>,
    seed_counter: u64,
    metrics: Arc<Metrics>,
    /// A weight swap waiting for its step boundary.
    pending: Option<Swap>,
    /// Label of the weights in use.
    version: Arc<str>,
}

impl Worker {
    pub(crate) fn new(
        model: Box<dyn Model>,
        tok: Arc<Tokenizer>,
        config: EngineConfig,
        shared: Arc<Shared>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let c = model.shape();
        let kv = KvSlab::new(
            c.n_layers,
            c.n_kv_heads,
            c.head_dim,
            config.slots,
            config.context,
        );
        let seed_counter = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        shared.kv_base.store(kv.base_ptr(), Ordering::SeqCst);
        metrics.weights_version.set(1);
        Self {
            pending: None,
            version: config.weights_version.as_str().into(),
            pool: SlotPool::new(config.slots),
            model,
            tok,
            config,
            shared,
            kv,
            queue: VecDeque::new(),
            running: Vec::new(),
            seed_counter,
            metrics,
        }
    }

    /// Runs until every handle is dropped.
    pub(crate) fn run(mut self, rx: Receiver<Command>) {
        loop {
            if self.queue.is_empty() && self.running.is_empty() && self.pending.is_none() {
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
            self.drop_cancelled();
            self.apply_swap();
            if self.pending.is_none() {
                self.admit();
            }
            self.decode_step();
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
                self.queue.push_back(q);
            }
            // One swap at a time (the admin API serialises them); a second one is
            // refused by dropping its reply.
            Command::Swap(swap) if self.pending.is_none() => self.pending = Some(swap),
            Command::Swap(_) => {}
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
                s.tx.send(Event::Error(EngineError::Aborted));
                self.metrics
                    .requests
                    .with_label_values(&[s.req.route, "aborted"])
                    .inc();
                aborted += 1;
            }
        }
        let old = std::mem::replace(&mut self.model, swap.model);
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
        // If the requester has gone, the old weights are dropped here.
        let _ = swap.reply.send(report);
    }

    /// Cancellation by drop: queued requests whose client left never reach prefill, and
    /// running ones give their slot back now. Requests past the deadline end with an error.
    fn drop_cancelled(&mut self) {
        let m = &self.metrics;
        let count =
            |route: &'static str, why: &str| m.requests.with_label_values(&[route, why]).inc();
        let timeout = self.config.request_timeout;
        let late = |since: Instant| timeout.is_some_and(|t| since.elapsed() > t);
        let secs = timeout.map_or(0.0, |t| t.as_secs_f64());
        let keep = |tx: &crate::handle::EventSender, submitted: Instant, route| {
            let gone = tx.is_closed();
            let expired = !gone && late(submitted);
            if expired {
                tx.send(Event::Error(EngineError::TimedOut(secs)));
            }
            if gone || expired {
                count(route, if gone { "cancelled" } else { "timeout" });
            }
            !(gone || expired)
        };
        // Dropping a queued entry drops its queue permit, which releases the counters.
        self.queue.retain(|q| keep(&q.tx, q.submitted, q.req.route));
        self.running
            .retain(|s| keep(&s.tx, s.submitted, s.req.route));
    }

    fn buckets(&self) -> Buckets {
        Buckets {
            min: self.config.min_bucket,
            max: self.config.context,
        }
    }

    /// Prefills bucket batches into free slots while both exist.
    fn admit(&mut self) {
        loop {
            let waiting: Vec<Waiting> = self
                .queue
                .iter()
                .map(|q| Waiting {
                    prompt_len: q.req.prompt.len(),
                })
                .collect();
            let Some(p) = plan(
                &waiting,
                self.pool.available(),
                self.config.max_prefill_tokens,
                self.buckets(),
            ) else {
                return;
            };
            // Take the picked entries out of the queue, keeping the others in order.
            let mut picked = Vec::with_capacity(p.picks.len());
            for (k, &i) in p.picks.iter().enumerate() {
                picked.push(
                    self.queue
                        .remove(i - k)
                        .expect("plan() returns indices of the queue it was given"),
                );
            }
            let real: usize = picked.iter().map(|q| q.req.prompt.len()).sum();
            let padding = p.padding(&waiting);
            self.shared.prefill_tokens.fetch_add(real, Ordering::SeqCst);
            self.shared
                .padding_tokens
                .fetch_add(padding, Ordering::SeqCst);
            let m = &self.metrics;
            m.prompt_tokens_total.inc_by(real as u64);
            m.prefill_padding.inc_by(padding as u64);
            m.prefill_requests
                .with_label_values(&[&p.bucket.to_string()])
                .inc_by(picked.len() as u64);
            let now = Instant::now();
            for q in &picked {
                m.queue_time.observe((now - q.submitted).as_secs_f64());
            }
            self.prefill(picked);
        }
    }

    fn prefill(&mut self, batch: Vec<Queued>) {
        if crate::failpoint::enabled("engine-panic") {
            for q in &batch {
                crate::failpoint::check(
                    "engine-panic",
                    &self.tok.decode(&q.req.prompt).unwrap_or_default(),
                );
            }
        }
        let mut seqs = Vec::with_capacity(batch.len());
        for q in batch {
            let lease = self
                .pool
                .lease()
                .expect("plan() never picks more requests than free slots");
            // The queue permit drops here: the request no longer waits.
            seqs.push(Sequence::new(q.req, q.tx, lease, q.submitted));
        }
        let mut rows = Vec::new();
        let mut last = Vec::new();
        for s in &seqs {
            let slot = s.lease.slot();
            for (pos, &token) in s.req.prompt.iter().enumerate() {
                rows.push(TokenRow { token, slot, pos });
            }
            last.push(rows.len() - 1);
        }
        for s in &seqs {
            if let Some(c) = &s.req.constraint {
                self.metrics.constrained.with_label_values(&[c.kind]).inc();
            }
        }
        let t = Instant::now();
        let logits = self.forward_and_masks(&rows, &last, &mut seqs);
        self.metrics
            .prefill_duration
            .observe(t.elapsed().as_secs_f64());
        self.sample_into(seqs, &logits);
    }

    /// One token for every running sequence.
    fn decode_step(&mut self) {
        if self.running.is_empty() {
            return;
        }
        let mut seqs = std::mem::take(&mut self.running);
        let rows: Vec<TokenRow> = seqs
            .iter()
            .map(|s| TokenRow {
                token: *s
                    .history
                    .generated
                    .last()
                    .expect("a running sequence has sampled at least one token"),
                slot: s.lease.slot(),
                pos: s.last_position(),
            })
            .collect();
        let want: Vec<usize> = (0..rows.len()).collect();
        let t = Instant::now();
        let logits = self.forward_and_masks(&rows, &want, &mut seqs);
        self.metrics.decode_step.observe(t.elapsed().as_secs_f64());
        self.metrics.decode_batch.observe(rows.len() as f64);
        self.sample_into(seqs, &logits);
    }

    /// The model's logits for `rows`, while the grammar masks of the constrained
    /// sequences among `seqs` are computed beside it (on the compute pool, all sequences
    /// in parallel: docs/ARCHITECTURE.md, "Constrained decoding").
    fn forward_and_masks(
        &mut self,
        rows: &[TokenRow],
        want: &[usize],
        seqs: &mut [Sequence],
    ) -> Vec<f32> {
        if seqs.iter().all(|s| s.guide.is_none()) {
            return self.model.forward(&mut self.kv, rows, want);
        }
        let (model, kv, metrics) = (&self.model, &mut self.kv, &self.metrics);
        std::thread::scope(|scope| {
            let mut work: Vec<(&mut Guide, &mut Option<String>)> = seqs
                .iter_mut()
                .filter_map(|s| Some((s.guide.as_mut()?, &mut s.grammar_error)))
                .collect();
            let masks = scope.spawn(move || {
                let t = Instant::now();
                // On the compute pool, between the forward pass's own tasks.
                crate::model::pool().install(|| {
                    work.par_iter_mut().for_each(|(g, err)| {
                        if let Err(e) = g.compute() {
                            **err = Some(e);
                        }
                    })
                });
                metrics.mask_time.observe(t.elapsed().as_secs_f64());
            });
            let logits = model.forward(kv, rows, want);
            masks.join().expect("mask computation does not panic");
            logits
        })
    }

    /// Samples one token per sequence from its row of `logits`; sequences that go on
    /// join `running`, finished ones are dropped (freeing their slots). A constrained
    /// sequence samples under its grammar's mask and feeds the token back to it; if the
    /// grammar fails, that sequence alone ends with an error.
    fn sample_into(&mut self, seqs: Vec<Sequence>, logits: &[f32]) {
        let vocab = self.model.shape().vocab;
        // Every sequence's choice first, in parallel on the compute pool (each depends
        // only on its own row, parameters, history and step), then the bookkeeping in order.
        let mut seqs = seqs;
        let choices: Vec<Option<Sampled>> = {
            let jobs: Vec<Option<Job>> = seqs
                .iter_mut()
                .enumerate()
                .map(|(i, s)| {
                    if s.grammar_error.is_some() {
                        return None;
                    }
                    let banned = (s.generated() < s.req.min_tokens).then(|| {
                        // Before min_tokens, end tokens cannot be chosen.
                        let mut p = s.req.params.clone();
                        p.logit_bias
                            .extend(s.req.stop_ids.iter().map(|&t| (t, -100.0)));
                        p
                    });
                    Some(Job {
                        row: &logits[i * vocab..(i + 1) * vocab],
                        banned,
                        params: &s.req.params,
                        history: &s.history,
                        step: s.generated() as u64,
                        n_top: s.req.logprobs.unwrap_or(0),
                        mask: s.guide.as_mut().and_then(|g| g.mask.take()),
                    })
                })
                .collect();
            crate::model::pool()
                .install(|| jobs.par_iter().map(|j| j.as_ref().map(Job::run)).collect())
        };
        for (mut s, sampled) in seqs.drain(..).zip(choices) {
            let Some(sampled) = sampled else {
                let e = s.grammar_error.take().unwrap_or_default();
                self.fail(s, e);
                continue;
            };
            let ends = s.req.stop_ids.contains(&sampled.token);
            if let Some(g) = &mut s.guide
                && !ends
                && let Err(e) = g.commit(sampled.token)
            {
                self.fail(s, e);
                continue;
            }
            let progress = s.accept(
                sampled,
                &self.tok,
                self.config.context,
                &self.version,
                &self.metrics,
            );
            if progress == Progress::Running {
                self.running.push(s);
            }
        }
    }

    /// Ends `s` with a grammar error.
    fn fail(&self, s: Sequence, why: String) {
        s.tx.send(Event::Error(EngineError::Grammar(why)));
        self.metrics
            .requests
            .with_label_values(&[s.req.route, "grammar_error"])
            .inc();
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
        let live: usize = self
            .running
            .iter()
            .map(|s| s.req.prompt.len() + s.generated())
            .sum();
        m.kv_usage
            .set(live as f64 / (self.config.slots * self.config.context) as f64);
    }
}
