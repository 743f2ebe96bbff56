//! One engine step: a forward pass carrying every decoding sequence's next row and, within
//! `--max-batch-tokens`, chunks of the prompts being prefilled, then a token for every
//! sequence whose logits came out (docs/ARCHITECTURE.md, "Chunked prefill").

use rayon::prelude::*;
use std::time::Instant;

use super::Worker;
use crate::constraint::Guide;
use crate::kv::TokenRow;
use crate::request::PromptToken;
use crate::sampling::scores;
use crate::scheduler::{Need, plan_step};
use crate::sequence::{Progress, Sequence};

/// What a sequence put into a step.
#[derive(Clone, Copy, Default)]
struct Part {
    /// Its first row among the logits returned, and how many it has there.
    logits: usize,
    n_logits: usize,
    /// Positions of its slot this step writes: one decode row, or a prompt chunk.
    rows: usize,
    /// Whether they are prompt positions.
    prompt: bool,
    /// It samples a token from its last logits row (before any drafts' rows).
    samples: bool,
    /// Drafted tokens it verifies: rows (and logits rows) after its decode row.
    drafts: usize,
}

impl Worker {
    /// What each running sequence asks of the next step (`scheduler::plan_step`'s input).
    fn needs(&self) -> Vec<Need> {
        let c = self.cache.borrow();
        self.running
            .iter()
            .map(|s| {
                let slot = s.lease.slot();
                let mut n = Need {
                    computed: s.computed,
                    prefill_end: s.prefill_end(),
                    held: c.held(slot),
                    frees: c.freed_by(slot),
                    preemptible: s.beams.is_none(),
                    parked: s.parked,
                    ..Need::default()
                };
                if s.parked {
                    return n;
                }
                if let Some(search) = &s.beams {
                    if !s.is_prefilling() {
                        n.decode = search.live.len();
                        n.decode_blocks = search
                            .live
                            .iter()
                            .map(|b| {
                                let pos = s.req.prompt.len() + b.tokens.len() - 1;
                                c.needed(b.slot, pos, pos + 1)
                            })
                            .sum();
                        return n;
                    }
                } else if !s.is_prefilling() {
                    n.decode = 1;
                    n.decode_blocks = c.needed(slot, s.computed, s.computed + 1);
                    n.drafts = s.draft.len();
                    n.draft_blocks =
                        c.needed(slot, s.computed, s.computed + 1 + n.drafts) - n.decode_blocks;
                    return n;
                }
                n.copy_first = c.shares_block_at(slot, s.computed);
                n
            })
            .collect()
    }

    /// Preempts the sequences `plan_step` names: their blocks go back to the pool (cached
    /// ones stay cached) and they compute their tokens again once resumed.
    fn preempt(&mut self, which: &[usize]) {
        for &i in which {
            let s = &mut self.running[i];
            self.cache.borrow_mut().free(s.lease.slot());
            s.park();
            self.metrics.preemptions.inc();
        }
    }

    /// Builds and runs one step; sequences that finish are dropped, freeing their slots.
    pub(super) fn step(&mut self) {
        if self.running.is_empty() {
            return;
        }
        self.tick += 1;
        self.cache.borrow_mut().now = self.tick;
        let decoding_now = self.running.iter().any(|s| !s.parked && !s.is_prefilling());
        // Rows late in a prompt weigh more only to keep the decoding streams' steps short;
        // with none decoding, nothing waits on this step: a prompt row is one token.
        let break_even = if decoding_now {
            self.model.shape().attention_break_even
        } else {
            0
        };
        self.draft();
        let available = self.cache.borrow().available();
        let plan = plan_step(
            &self.needs(),
            available,
            self.config.max_batch_tokens,
            break_even,
        );
        self.preempt(&plan.preempt);
        let mut seqs = std::mem::take(&mut self.running);
        let mut counts = plan.rows;
        // Blocks for every row about to be written, copies of shared ones first. The plan
        // counted them; a sequence that still finds no room sits this step out.
        let mut cache = self.cache.borrow_mut();
        for (s, n) in seqs.iter_mut().zip(&mut counts) {
            if *n == 0 {
                s.draft.clear();
                continue;
            }
            if s.beams.is_none() && !s.is_prefilling() {
                // The drafts the plan granted: all of them or none.
                s.draft.truncate(*n - 1);
            }
            let ok = match &s.beams {
                Some(search) if !s.is_prefilling() => search.live.iter().all(|b| {
                    let pos = s.req.prompt.len() + b.tokens.len() - 1;
                    cache.reserve(b.slot, pos, pos + 1).is_ok()
                }),
                _ => cache
                    .reserve(s.lease.slot(), s.computed, s.computed + *n)
                    .is_ok(),
            };
            if !ok {
                *n = 0;
            }
        }
        drop(cache);
        let mut rows = Vec::new();
        let mut want = Vec::new();
        let mut parts = vec![Part::default(); seqs.len()];
        // Decode rows first: a prompt never delays the streams already running.
        for ((s, part), &n) in seqs.iter().zip(&mut parts).zip(&counts) {
            if n == 0 || s.is_prefilling() {
                continue;
            }
            if let Some(search) = &s.beams {
                // A row per live beam, each in its own slot.
                *part = Part {
                    logits: want.len(),
                    n_logits: search.live.len(),
                    rows: 0,
                    prompt: false,
                    samples: true,
                    drafts: 0,
                };
                for b in &search.live {
                    want.push(rows.len());
                    rows.push(TokenRow {
                        token: *b.tokens.last().expect("a live beam has a token"),
                        slot: b.slot,
                        pos: s.req.prompt.len() + b.tokens.len() - 1,
                    });
                }
                continue;
            }
            let token = *s
                .history
                .generated
                .last()
                .expect("a decoding sequence has sampled a token");
            // Its row, then a row per drafted token: the logits after each say whether
            // the next draft was the model's own choice.
            let k = s.draft.len();
            *part = Part {
                logits: want.len(),
                n_logits: 1 + k,
                rows: 1 + k,
                prompt: false,
                samples: true,
                drafts: k,
            };
            for (i, token) in std::iter::once(token)
                .chain(s.draft.iter().copied())
                .enumerate()
            {
                want.push(rows.len());
                rows.push(TokenRow {
                    token,
                    slot: s.lease.slot(),
                    pos: s.computed + i,
                });
            }
        }
        let decode_rows = rows.len();
        for ((s, part), &n) in seqs.iter().zip(&mut parts).zip(&counts) {
            if n == 0 || !s.is_prefilling() {
                continue;
            }
            let (from, to, len) = (s.computed, s.computed + n, s.req.prompt.len());
            // Rows computed again after a preemption want no logits: their tokens are known.
            let fresh = !s.recomputes();
            let completes = to == s.prefill_end();
            let all = fresh && s.req.prompt_logprobs.is_some();
            part.logits = want.len();
            part.rows = n;
            part.prompt = true;
            part.samples = fresh && completes && s.req.max_tokens > 0;
            for pos in from..to {
                if all || (fresh && pos + 1 == len) {
                    want.push(rows.len());
                }
                rows.push(TokenRow {
                    token: s.token_at(pos),
                    slot: s.lease.slot(),
                    pos,
                });
            }
            part.n_logits = want.len() - part.logits;
        }
        if rows.is_empty() {
            // Nothing could run (a beam search waiting for blocks): nobody moves.
            self.running = seqs;
            return;
        }
        let samples: Vec<bool> = parts.iter().map(|p| p.samples).collect();
        let t = Instant::now();
        let mut logits = std::mem::take(&mut self.logits);
        self.forward_and_masks(&rows, &want, &mut seqs, &samples, &mut logits);
        let took = t.elapsed().as_secs_f64();
        if rows.len() > decode_rows {
            self.metrics.prefill_duration.observe(took);
        } else {
            self.metrics.decode_step.observe(took);
        }
        let decoding = parts.iter().filter(|p| p.samples && !p.prompt).count();
        if decoding > 0 {
            self.metrics.decode_batch.observe(decoding as f64);
        }
        let vocab = self.model.shape().vocab;
        let mut sampling = Vec::with_capacity(seqs.len());
        for (mut s, part) in seqs.into_iter().zip(parts) {
            let from = s.computed;
            // Drafted rows count once verified (`verify`).
            s.computed += part.rows - part.drafts;
            if self.config.prefix_reuse && part.rows > 0 {
                // Full blocks of the prompt (of a beam search: only those) and of the
                // generated tokens join the prefix cache.
                let upto = match s.beams {
                    Some(_) => s.computed.min(s.req.prompt.len()),
                    None => s.computed,
                };
                self.cache
                    .borrow_mut()
                    .publish(s.lease.slot(), |p| s.token_at(p), upto);
            }
            let fresh = !s.recomputes();
            if let Some(n_top) = s.req.prompt_logprobs.filter(|_| part.prompt && fresh) {
                for (k, pos) in (from..s.computed).enumerate() {
                    let Some(&next) = s.req.prompt.get(pos + 1) else {
                        break;
                    };
                    let row = &logits[(part.logits + k) * vocab..][..vocab];
                    let (logprob, top) = scores(row, n_top, next);
                    let above = row.iter().filter(|&&l| l > row[next as usize]).count();
                    s.prompt_scores.push(PromptToken {
                        id: next,
                        logprob: Some(logprob),
                        rank: above + 1,
                        top,
                    });
                }
            }
            if part.prompt
                && fresh
                && !s.is_prefilling()
                && s.prompt_done(&self.version, &self.metrics) == Progress::Finished
            {
                continue;
            }
            if s.beams.is_some() && part.samples {
                if self.advance_beams(&mut s, &logits[..], part.logits + part.n_logits) {
                    sampling.push((s, None));
                }
                continue;
            }
            let row = part
                .samples
                .then(|| part.logits + part.n_logits - 1 - part.drafts);
            sampling.push((s, row));
        }
        self.sample_into(sampling, &logits);
        self.logits = logits;
    }

    /// One beam-search step for `s`, whose live beams' logits rows end at row `end`:
    /// extends the beams, copies the slots the new ones need, and ends the search when it
    /// is over. Returns whether it goes on.
    fn advance_beams(&mut self, s: &mut Sequence, logits: &[f32], end: usize) -> bool {
        let vocab = self.model.shape().vocab;
        let search = s.beams.as_mut().expect("a beam search");
        let live = search.live.len();
        let rows: Vec<&[f32]> = (end - live..end)
            .map(|r| &logits[r * vocab..(r + 1) * vocab])
            .collect();
        let lim = crate::beam::Limits {
            prompt_len: s.req.prompt.len(),
            max_tokens: s.req.max_tokens,
            context: self.config.context,
            stop_ids: &s.req.stop_ids,
            stop_strings: &s.req.stop_strings,
        };
        for c in search.advance(&rows, &self.tok, &lim) {
            // Weights never change under a running beam search (a reload waits or ends it).
            self.cache.borrow_mut().fork(c.from, c.to, c.len);
        }
        if search.live.is_empty() {
            s.finish_beams(&self.version, &self.metrics);
            return false;
        }
        true
    }

    /// The model's logits for `rows` (into `logits`), while the grammar masks of the
    /// constrained sequences that sample this step are computed beside it (on the compute
    /// pool, all sequences in parallel: docs/ARCHITECTURE.md, "Constrained decoding").
    fn forward_and_masks(
        &mut self,
        rows: &[TokenRow],
        want: &[usize],
        seqs: &mut [Sequence],
        samples: &[bool],
        logits: &mut Vec<f32>,
    ) {
        let mut work: Vec<(&mut Guide, &mut Option<String>)> = seqs
            .iter_mut()
            .zip(samples)
            .filter(|(s, on)| **on && s.grammar_on())
            .filter_map(|(s, _)| Some((s.guide.as_mut()?, &mut s.grammar_error)))
            .collect();
        if work.is_empty() {
            let mut cache = self.cache.borrow_mut();
            return self.model.forward_into(&mut cache.slab, rows, want, logits);
        }
        let mut cache = self.cache.borrow_mut();
        let (model, kv, metrics) = (&self.model, &mut cache.slab, &self.metrics);
        std::thread::scope(|scope| {
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
            model.forward_into(kv, rows, want, logits);
            masks.join().expect("mask computation does not panic");
        })
    }
}
