//! Admission: queued requests get free slots, grouped by prompt bucket, placed where the
//! slab already holds the longest prefix of their prompt (docs/ARCHITECTURE.md, "Buckets
//! and batches", "Prefix reuse"). Admission computes nothing: the steps prefill the
//! admitted prompts chunk by chunk.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::Worker;
use crate::beam::BeamSearch;
use crate::prefix::{lru_key, place, reusable};
use crate::protocol::Queued;
use crate::request::ValidRequest;
use crate::scheduler::{Buckets, Waiting, plan};
use crate::sequence::Sequence;

/// Whether `req` may take keys and values from a sequence running `other`.
fn may_share(req: &ValidRequest, other: &ValidRequest, reuse_on: bool) -> bool {
    (reuse_on && req.cache_prompt && other.cache_prompt)
        || (req.share.is_some() && req.share == other.share)
}

impl Worker {
    fn buckets(&self) -> Buckets {
        Buckets {
            min: self.config.min_bucket,
            max: self.config.context,
        }
    }

    /// Prompt tokens the next step can still take: the budget minus every decode row and
    /// every admitted prompt's remaining tokens.
    fn budget_left(&self) -> usize {
        let taken: usize = self.running.iter().map(Sequence::rows_wanted).sum();
        self.config.max_batch_tokens.saturating_sub(taken)
    }

    /// A queued request waits while a sibling (same share key: the choices of `n`, the
    /// candidates of `best_of`) is still prefilling their prompt: once that prefill is done
    /// it copies the prompt instead of computing it again. Other requests never wait for
    /// each other (that would serialise requests sharing a system prompt); they reuse what
    /// is already written.
    fn defer(&self, q: &Queued) -> bool {
        let min = self.config.min_prefix_reuse.max(1);
        q.req.share.is_some()
            && q.req.prompt_logprobs.is_none()
            && self.running.iter().any(|s| {
                s.is_prefilling()
                    && s.req.share == q.req.share
                    && reusable(&q.req.prompt, &s.req.prompt) >= min
            })
    }

    /// Admits bucket groups of queued requests into free slots while both exist and the
    /// next step has room for their prompts (the oldest request is admitted even when
    /// its prompt alone exceeds the room: it is prefilled over several steps).
    pub(super) fn admit(&mut self) {
        loop {
            let left = self.budget_left();
            let prefilling = self.running.iter().any(Sequence::is_prefilling);
            if left == 0 && prefilling {
                return;
            }
            let mut open: Vec<usize> = (0..self.queue.len())
                .filter(|&i| !self.defer(&self.queue[i]))
                .collect();
            // A beam search needs all its slots at once and is admitted alone, in queue
            // order: nobody behind it overtakes it.
            if let Some(at) = open.iter().position(|&i| self.queue[i].req.beam.is_some()) {
                if at == 0 {
                    let width = self.queue[open[0]].req.beam.map_or(1, |b| b.width);
                    if self.pool.available() < width {
                        return;
                    }
                    let q = self.queue.remove(open[0]).expect("an open entry");
                    self.metrics
                        .queue_time
                        .observe(q.submitted.elapsed().as_secs_f64());
                    self.start(q);
                    continue;
                }
                open.truncate(at);
            }
            let waiting: Vec<Waiting> = open
                .iter()
                .map(|&i| Waiting {
                    prompt_len: self.queue[i].req.prompt.len(),
                })
                .collect();
            let room = if prefilling { left } else { left.max(1) };
            let Some(p) = plan(&waiting, self.pool.available(), room, self.buckets()) else {
                return;
            };
            // Take the picked entries out of the queue, keeping the others in order.
            let mut picked = Vec::with_capacity(p.picks.len());
            for (k, &i) in p.picks.iter().enumerate() {
                let at = open[i] - k;
                picked.push(self.queue.remove(at).expect("plan() picks queue entries"));
            }
            // A pick may now have to wait for a batch mate it can share with (the
            // choices of `n`): it goes back to the front of the queue.
            let mut deferred = Vec::new();
            let now = Instant::now();
            let mut started = 0;
            for q in picked {
                if self.defer(&q) {
                    deferred.push(q);
                    continue;
                }
                let len = q.req.prompt.len();
                self.shared.prefill_tokens.fetch_add(len, Ordering::SeqCst);
                let padding = p.bucket.saturating_sub(len);
                self.shared
                    .padding_tokens
                    .fetch_add(padding, Ordering::SeqCst);
                self.metrics.prefill_padding.inc_by(padding as u64);
                self.metrics
                    .queue_time
                    .observe((now - q.submitted).as_secs_f64());
                self.start(q);
                started += 1;
            }
            self.metrics
                .prefill_requests
                .with_label_values(&[&p.bucket.to_string()])
                .inc_by(started);
            for q in deferred.into_iter().rev() {
                self.queue.push_front(q);
            }
        }
    }

    /// Leases the best slot for `q` (prefix reuse), copies a prefix from a busy slot when
    /// that is where it is, and adds the sequence to `running`.
    fn start(&mut self, q: Queued) {
        if crate::failpoint::enabled("engine-panic") {
            crate::failpoint::check(
                "engine-panic",
                &self.tok.decode(&q.req.prompt).unwrap_or_default(),
            );
        }
        let reuse_on = self.config.prefix_reuse;
        let wants_all_rows = q.req.prompt_logprobs.is_some();
        let busy: Vec<usize> = self
            .running
            .iter()
            .filter(|s| !wants_all_rows && may_share(&q.req, &s.req, reuse_on))
            .map(|s| s.lease.slot())
            .collect();
        let reuse_free = reuse_on && q.req.cache_prompt && !wants_all_rows;
        let at = place(
            &q.req.prompt,
            &self.caches,
            &self.pool.free_slots(),
            &busy,
            self.config.min_prefix_reuse,
            reuse_free,
            q.req.share,
        )
        .expect("plan() never picks more requests than free slots");
        let lease = self
            .pool
            .lease_slot(at.slot)
            .expect("place() returns a free slot");
        if let Some(from) = at.copy_from {
            self.kv.copy_prefix(from, at.slot, at.reuse);
            let tokens = self.caches[from].tokens[..at.reuse].to_vec();
            self.caches[at.slot].tokens = tokens;
        } else {
            self.caches[at.slot].tokens.truncate(at.reuse);
        }
        self.caches[at.slot].used_at = self.tick;
        self.caches[at.slot].share = q.req.share;
        let m = &self.metrics;
        m.prefix_queries.inc_by(q.req.prompt.len() as u64);
        m.prefix_hits.inc_by(at.reuse as u64);
        m.prompt_tokens_total
            .inc_by((q.req.prompt.len() - at.reuse) as u64);
        if let Some(c) = &q.req.constraint {
            m.constrained.with_label_values(&[c.kind]).inc();
        }
        let beam = q.req.beam;
        // The queue permit drops here: the request no longer waits.
        let mut s = Sequence::new(q.req, q.tx, lease, q.submitted, at.reuse);
        if let Some(spec) = beam {
            // The other beams' slots: the least recently used free ones.
            let mut free = self.pool.free_slots();
            free.sort_by_key(|&f| lru_key(&self.caches, f));
            let mut slots = vec![at.slot];
            for f in free.into_iter().take(spec.width - 1) {
                s.extra.push(self.pool.lease_slot(f).expect("a free slot"));
                self.caches[f].tokens.clear();
                slots.push(f);
            }
            s.beams = Some(BeamSearch::new(spec, slots));
        }
        self.running.push(s);
    }
}
