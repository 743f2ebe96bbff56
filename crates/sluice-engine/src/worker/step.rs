//! One engine step: a forward pass carrying every decoding sequence's next row and, within
//! `--max-batch-tokens`, chunks of the prompts being prefilled, then a token for every
//! sequence whose logits came out (docs/ARCHITECTURE.md, "Chunked prefill").

use rayon::prelude::*;
use std::time::Instant;

use super::Worker;
use crate::constraint::{Guide, SimpleVob};
use crate::kv::TokenRow;
use crate::request::PromptToken;
use crate::sampling::{History, Sampled, SamplingParams, sample_with, scores};
use crate::scheduler::{chunk_cost, chunk_rows};
use crate::sequence::{Progress, Sequence};

/// One sequence's sampling inputs, borrowed for the parallel pass of `sample_into`.
struct Job<'a> {
    row: &'a [f32],
    /// The parameters with end tokens forbidden, before `min_tokens`.
    banned: Option<SamplingParams>,
    params: &'a SamplingParams,
    history: &'a History,
    step: u64,
    n_top: Option<usize>,
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
            self.mask
                .as_ref()
                .map(|m| |work: &mut [f32]| crate::constraint::apply(m, work)),
        )
    }
}

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
    /// It samples a token from its last logits row.
    samples: bool,
}

impl Worker {
    /// Builds and runs one step; sequences that finish are dropped, freeing their slots.
    pub(super) fn step(&mut self) {
        if self.running.is_empty() {
            return;
        }
        self.tick += 1;
        let mut seqs = std::mem::take(&mut self.running);
        let mut rows = Vec::new();
        let mut want = Vec::new();
        let mut parts = vec![Part::default(); seqs.len()];
        // Decode rows first: a prompt never delays the streams already running.
        for (s, part) in seqs.iter().zip(&mut parts) {
            if s.is_prefilling() {
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
            *part = Part {
                logits: want.len(),
                n_logits: 1,
                rows: 1,
                prompt: false,
                samples: true,
            };
            want.push(rows.len());
            rows.push(TokenRow {
                token,
                slot: s.lease.slot(),
                pos: s.computed,
            });
        }
        let decode_rows = rows.len();
        let mut budget = self.config.max_batch_tokens.saturating_sub(decode_rows);
        // Rows late in a prompt weigh more only to keep the decoding streams' steps short;
        // with none decoding, nothing waits on this step: a prompt row is one token.
        let break_even = if decode_rows == 0 {
            0
        } else {
            self.model.shape().attention_break_even
        };
        for (s, part) in seqs.iter().zip(&mut parts) {
            if !s.is_prefilling() || budget == 0 {
                continue;
            }
            let (from, len) = (s.computed, s.req.prompt.len());
            // Rows late in a long prompt count more: their attention grows with position.
            let to = from + chunk_rows(from, len - from, budget, break_even);
            budget = budget.saturating_sub(chunk_cost(from, to - from, break_even));
            let completes = to == len;
            let all = s.req.prompt_logprobs.is_some();
            part.logits = want.len();
            part.rows = to - from;
            part.prompt = true;
            part.samples = completes && s.req.max_tokens > 0;
            for pos in from..to {
                if all || pos + 1 == len {
                    want.push(rows.len());
                }
                let slot = s.lease.slot();
                rows.push(TokenRow {
                    token: s.req.prompt[pos],
                    slot,
                    pos,
                });
            }
            part.n_logits = want.len() - part.logits;
        }
        for r in &rows {
            let c = &mut self.caches[r.slot];
            c.used_at = self.tick;
            // Only a contiguous prefix is recorded (a reload clears busy slots too).
            if c.tokens.len() == r.pos {
                c.tokens.push(r.token);
            }
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
        if decode_rows > 0 {
            self.metrics.decode_batch.observe(decode_rows as f64);
        }
        let vocab = self.model.shape().vocab;
        let mut sampling = Vec::with_capacity(seqs.len());
        for (mut s, part) in seqs.into_iter().zip(parts) {
            let from = s.computed;
            s.computed += part.rows;
            if let Some(n_top) = s.req.prompt_logprobs.filter(|_| part.prompt) {
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
            let row = part.samples.then(|| part.logits + part.n_logits - 1);
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
            self.kv.copy_prefix(c.from, c.to, c.len);
            let tokens = self.caches[c.from].tokens.get(..c.len).map(<[u32]>::to_vec);
            self.caches[c.to].tokens = tokens.unwrap_or_default();
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
            .filter(|(_, s)| **s)
            .filter_map(|(s, _)| Some((s.guide.as_mut()?, &mut s.grammar_error)))
            .collect();
        if work.is_empty() {
            return self.model.forward_into(&mut self.kv, rows, want, logits);
        }
        let (model, kv, metrics) = (&self.model, &mut self.kv, &self.metrics);
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

    /// Samples one token for every sequence with a logits row (`Some(i)`: row `i` of
    /// `logits`); the others go back to `running` untouched. Sequences that go on join
    /// `running`, finished ones are dropped (freeing their slots). A constrained sequence
    /// samples under its grammar's mask and feeds the token back to it; if the grammar
    /// fails, that sequence alone ends with an error.
    fn sample_into(&mut self, mut seqs: Vec<(Sequence, Option<usize>)>, logits: &[f32]) {
        let vocab = self.model.shape().vocab;
        // Every sequence's choice first, in parallel on the compute pool (each depends
        // only on its own row, parameters, history and step), then the bookkeeping in order.
        let choices: Vec<Option<Option<Sampled>>> = {
            let jobs: Vec<Option<Option<Job>>> = seqs
                .iter_mut()
                .map(|(s, row)| {
                    let i = (*row)?;
                    if s.grammar_error.is_some() {
                        return Some(None);
                    }
                    let banned = (s.generated() < s.req.min_tokens).then(|| {
                        // Before min_tokens, end tokens cannot be chosen.
                        let mut p = s.req.params.clone();
                        p.logit_bias
                            .extend(s.req.stop_ids.iter().map(|&t| (t, -100.0)));
                        p
                    });
                    Some(Some(Job {
                        row: &logits[i * vocab..(i + 1) * vocab],
                        banned,
                        params: &s.req.params,
                        history: &s.history,
                        step: s.generated() as u64,
                        n_top: s.req.logprobs.or(s.req.rank_by_logprob.then_some(0)),
                        mask: s.guide.as_mut().and_then(|g| g.mask.take()),
                    }))
                })
                .collect();
            sluice_kernels::threads::map(jobs.len(), |i| {
                jobs[i].as_ref().map(|j| j.as_ref().map(Job::run))
            })
        };
        for ((mut s, _), choice) in seqs.drain(..).zip(choices) {
            let sampled = match choice {
                None => {
                    self.running.push(s);
                    continue;
                }
                Some(None) => {
                    let e = s.grammar_error.take().unwrap_or_default();
                    self.fail(s, e);
                    continue;
                }
                Some(Some(sampled)) => sampled,
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
}
