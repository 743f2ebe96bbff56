//! Admission: preempted sequences get their blocks back first; then queued requests get
//! free slots, grouped by prompt bucket, starting from the longest prefix of their prompt
//! the KV cache holds, when the pool has the blocks for the rest (docs/ARCHITECTURE.md,
//! "Buckets and batches", "The KV pool"). Admission computes nothing: the steps prefill
//! the admitted prompts chunk by chunk.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::Worker;
use crate::beam::BeamSearch;
use crate::cache::blocks_for;
use crate::protocol::Queued;
use crate::request::ValidRequest;
use crate::scheduler::{Buckets, Waiting, plan};
use crate::sequence::Sequence;

/// Length of the common prefix of `a` and `b`.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Blocks kept free for running sequences to grow into, beyond what an admission takes:
/// 1% of the pool (vLLM's watermark), so that admitting does not at once force a
/// preemption.
fn watermark(total: usize) -> usize {
    total / 100
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

    /// Whether `req` may look up the prefix cache. The choices of one request (a share
    /// key) may even without the prompt cache: their siblings' blocks are their own prompt.
    fn uses_cache(&self, req: &ValidRequest) -> bool {
        let allowed = self.config.prefix_reuse && (req.cache_prompt || req.share.is_some());
        allowed && req.prompt_logprobs.is_none()
    }

    /// Blocks the pool can still give to new work: available ones, less those the running
    /// prefills will still take.
    fn spare_blocks(&self) -> usize {
        let cache = self.cache.borrow();
        let promised: usize = self
            .running
            .iter()
            .filter(|s| !s.parked && s.is_prefilling())
            .map(|s| blocks_for(s.prefill_end()).saturating_sub(cache.held(s.lease.slot())))
            .sum();
        cache.available().saturating_sub(promised)
    }

    /// A queued request waits while a running sequence is computing blocks of its prompt
    /// that the cache does not hold yet: once they are written it takes them instead of
    /// computing them again, so requests arriving together with one system prompt compute
    /// it once. A sibling (same share key: the choices of `n`, the candidates of
    /// `best_of`) waits until the other has its whole prompt, then shares its blocks.
    fn defer(&self, q: &Queued) -> bool {
        let req = &q.req;
        if req.prompt_logprobs.is_some() {
            return false;
        }
        let min = self.config.min_prefix_reuse.max(1);
        let most = req.prompt.len() - 1;
        let block = sluice_kernels::KEY_BLOCK;
        let mut cached = None;
        self.running.iter().any(|s| {
            if s.parked || !s.is_prefilling() || s.recomputes() {
                return false;
            }
            let common = common_prefix(&req.prompt, &s.req.prompt).min(most);
            if common < min {
                return false;
            }
            if req.share.is_some() && req.share == s.req.share {
                return true;
            }
            let useful = common / block * block;
            if !self.uses_cache(req) || !self.config.prefix_reuse || s.computed >= useful {
                return false;
            }
            let have = *cached.get_or_insert_with(|| self.cache.borrow().lookup(&req.prompt, most));
            useful > have
        })
    }

    /// Gives preempted sequences their blocks back, oldest first, while the pool has room
    /// for all they must compute again. Returns whether none is left waiting.
    fn resume(&mut self) -> bool {
        for i in 0..self.running.len() {
            if !self.running[i].parked {
                continue;
            }
            let s = &self.running[i];
            let end = s.prefill_end();
            let tokens: Vec<u32> = (0..end).map(|p| s.token_at(p)).collect();
            let use_cache = self.uses_cache(&s.req);
            let hit = if use_cache {
                self.cache.borrow().lookup(&tokens, end)
            } else {
                0
            };
            // Its recompute and its next decode row.
            let need = blocks_for(end + 1) - blocks_for(hit);
            if need > self.spare_blocks() {
                return false;
            }
            let slot = s.lease.slot();
            let reused = self.cache.borrow_mut().start(slot, &tokens, end, use_cache);
            let s = &mut self.running[i];
            s.computed = reused;
            s.parked = false;
        }
        true
    }

    /// Admits bucket groups of queued requests into free slots while both exist and the
    /// next step has room for their prompts (the oldest request is admitted even when
    /// its prompt alone exceeds the room: it is prefilled over several steps).
    pub(super) fn admit(&mut self) {
        if !self.resume() {
            return;
        }
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
                    let submitted = q.submitted;
                    if let Err(q) = self.start(q) {
                        self.queue.insert(open[0], *q);
                        return;
                    }
                    self.metrics
                        .queue_time
                        .observe(submitted.elapsed().as_secs_f64());
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
            // A pick may now have to wait for a batch mate it can share with, and one the
            // pool has no blocks for waits with all after it: back to the queue's front.
            let mut back = Vec::new();
            let now = Instant::now();
            let mut started = 0;
            let mut full = false;
            for q in picked {
                if full || self.defer(&q) {
                    back.push(q);
                    continue;
                }
                let (len, submitted) = (q.req.prompt.len(), q.submitted);
                if let Err(q) = self.start(q) {
                    full = true;
                    back.push(*q);
                    continue;
                }
                self.shared.prefill_tokens.fetch_add(len, Ordering::SeqCst);
                let padding = p.bucket.saturating_sub(len);
                self.shared
                    .padding_tokens
                    .fetch_add(padding, Ordering::SeqCst);
                self.metrics.prefill_padding.inc_by(padding as u64);
                self.metrics
                    .queue_time
                    .observe((now - submitted).as_secs_f64());
                started += 1;
            }
            self.metrics
                .prefill_requests
                .with_label_values(&[&p.bucket.to_string()])
                .inc_by(started);
            for q in back.into_iter().rev() {
                self.queue.push_front(q);
            }
            if full || started == 0 {
                return;
            }
        }
    }

    /// Starts `q` in the lowest free slot: its table shares a sibling's prompt blocks
    /// (same share key, prompt done) or begins with the cached prefix of its prompt.
    /// Gives `q` back when the pool has too few blocks for the rest of its prompt.
    fn start(&mut self, q: Queued) -> Result<(), Box<Queued>> {
        let len = q.req.prompt.len();
        let most = len - 1;
        let use_cache = self.uses_cache(&q.req);
        let sibling = self
            .running
            .iter()
            .filter(|s| {
                q.req.prompt_logprobs.is_none()
                    && q.req.share.is_some()
                    && s.req.share == q.req.share
                    && !s.parked
                    && !s.is_prefilling()
                    && s.beams.is_none()
            })
            .map(|s| {
                (
                    common_prefix(&q.req.prompt, &s.req.prompt).min(most),
                    s.lease.slot(),
                )
            })
            .filter(|&(n, _)| n >= self.config.min_prefix_reuse.max(1))
            .max_by_key(|&(n, _)| n);
        let hit = if use_cache {
            self.cache.borrow().lookup(&q.req.prompt, most)
        } else {
            0
        };
        // What the rest of the prompt takes: new blocks, and a copy of the shared one it
        // writes into first.
        let (reuse, need) = match sibling {
            Some((n, _)) if n > hit => {
                let copy = usize::from(!n.is_multiple_of(sluice_kernels::KEY_BLOCK));
                (n, blocks_for(len) - blocks_for(n) + copy)
            }
            _ => (hit, blocks_for(len) - blocks_for(hit)),
        };
        let width = q.req.beam.map_or(1, |b| b.width);
        let others = !self.running.is_empty();
        let reserve = if others {
            watermark(self.cache.borrow().total())
        } else {
            0
        };
        if need + (width - 1) + reserve > self.spare_blocks() {
            return Err(Box::new(q));
        }
        if crate::failpoint::enabled("engine-panic") {
            crate::failpoint::check(
                "engine-panic",
                &self.tok.decode(&q.req.prompt).unwrap_or_default(),
            );
        }
        let slot = *self
            .pool
            .free_slots()
            .first()
            .expect("plan() picks free slots");
        let lease = self.pool.lease_slot(slot).expect("a free slot");
        let mut cache = self.cache.borrow_mut();
        let reused = match sibling {
            Some((n, from)) if n > hit && cache.fork(from, slot, n) => n,
            _ => cache.start(slot, &q.req.prompt, most, use_cache),
        };
        drop(cache);
        debug_assert!(reused == reuse || reused == hit);
        let m = &self.metrics;
        m.prefix_queries.inc_by(len as u64);
        m.prefix_hits.inc_by(reused as u64);
        m.prompt_tokens_total.inc_by((len - reused) as u64);
        if let Some(c) = &q.req.constraint {
            m.constrained.with_label_values(&[c.kind]).inc();
        }
        let beam = q.req.beam;
        let Queued {
            permit,
            req,
            tx,
            submitted,
        } = q;
        // The request no longer waits: its place in the queue is free.
        drop(permit);
        let mut s = Sequence::new(req, tx, lease, submitted, reused);
        if let Some(spec) = beam {
            // The other beams' slots: the lowest free ones, their tables empty until the
            // search forks them.
            let mut slots = vec![slot];
            for f in self.pool.free_slots().into_iter().take(spec.width - 1) {
                s.extra.push(self.pool.lease_slot(f).expect("a free slot"));
                slots.push(f);
            }
            s.beams = Some(BeamSearch::new(spec, slots));
        }
        self.running.push(s);
        Ok(())
    }
}
