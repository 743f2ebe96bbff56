//! Choosing tokens from a step's logits: one per sequence with a logits row, all in
//! parallel, and then, for a sequence that drafted, the verification of its drafts
//! (docs/ARCHITECTURE.md, "Speculative decoding").

use super::Worker;
use crate::constraint::SimpleVob;
use crate::sampling::{History, Sampled, SamplingParams, sample_with};
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

impl<'a> Job<'a> {
    /// The inputs of `s`'s next choice from the logits `row`, without a grammar's mask.
    fn of(s: &'a Sequence, row: &'a [f32]) -> Self {
        let banned = (s.generated() < s.req.min_tokens).then(|| {
            // Before min_tokens, end tokens cannot be chosen.
            let mut p = s.req.params.clone();
            p.logit_bias
                .extend(s.req.stop_ids.iter().map(|&t| (t, -100.0)));
            p
        });
        Job {
            row,
            banned,
            params: &s.req.params,
            history: &s.history,
            step: s.generated() as u64,
            n_top: s.req.logprobs.or(s.req.rank_by_logprob.then_some(0)),
            mask: None,
        }
    }
}

/// The mask of `s`'s next choice: the one token its thinking budget forces, or its
/// grammar's (which, before a thinking section, also allows the section's opening token);
/// `vocab` is the logits row's length.
fn choice_mask(s: &mut Sequence, vocab: usize) -> Option<SimpleVob> {
    if let Some(id) = s.thinking.as_ref().and_then(|t| t.forced()) {
        let mut only = SimpleVob::alloc(vocab.max(id as usize + 1));
        only.allow_token(id);
        return Some(only);
    }
    let mut mask = s.guide.as_mut().and_then(|g| g.mask.take())?;
    if let Some(id) = s.thinking.as_ref().and_then(|t| t.opener())
        && (id as usize) < mask.len()
    {
        mask.allow_token(id);
    }
    Some(mask)
}

impl Worker {
    /// Samples one token for every sequence with a logits row (`Some(i)`: row `i` of
    /// `logits`); the others go back to `running` untouched. Sequences that go on join
    /// `running`, finished ones are dropped (freeing their slots). A constrained sequence
    /// samples under its grammar's mask and feeds the token back to it; if the grammar
    /// fails, that sequence alone ends with an error.
    pub(super) fn sample_into(&mut self, mut seqs: Vec<(Sequence, Option<usize>)>, logits: &[f32]) {
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
                    let mask = choice_mask(s, vocab);
                    Some(Some(Job {
                        mask,
                        ..Job::of(s, &logits[i * vocab..(i + 1) * vocab])
                    }))
                })
                .collect();
            sluice_kernels::threads::map(jobs.len(), |i| {
                jobs[i].as_ref().map(|j| j.as_ref().map(Job::run))
            })
        };
        for ((mut s, row), choice) in seqs.drain(..).zip(choices) {
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
            let feeds = s
                .thinking
                .as_ref()
                .is_none_or(|t| t.feeds_grammar(sampled.token));
            if let Some(g) = &mut s.guide
                && !ends
                && feeds
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
            let progress = match row {
                Some(row) if progress == Progress::Running && !s.draft.is_empty() => {
                    self.verify(&mut s, row, logits)
                }
                _ => progress,
            };
            if progress == Progress::Running {
                self.running.push(s);
            }
        }
    }

    /// Verifies `s`'s draft after its token from logits row `row` was accepted: while the
    /// token just chosen is the next drafted one, that draft's row (computed from it) is
    /// where the next token is chosen, exactly as a decode step would have chosen it: the
    /// same logits, history and random stream. The first mismatch ends it; the rows of the
    /// rejected drafts are left behind `computed` and written over later.
    fn verify(&mut self, s: &mut Sequence, row: usize, logits: &[f32]) -> Progress {
        let vocab = self.model.shape().vocab;
        let draft = std::mem::take(&mut s.draft);
        let mut accepted = 0;
        let mut progress = Progress::Running;
        for (j, &d) in draft.iter().enumerate() {
            if s.history.generated.last() != Some(&d) {
                break;
            }
            // A constrained sequence chooses under its grammar's mask for this state,
            // computed here (the step computed only the first row's).
            if let Some(Err(_)) = s.guide.as_mut().map(|g| g.compute()) {
                // As a rejection: the next step meets the error the usual way.
                break;
            }
            let mask = choice_mask(s, vocab);
            accepted += 1;
            s.computed += 1;
            let r = row + 1 + j;
            let sampled = Job {
                mask,
                ..Job::of(s, &logits[r * vocab..(r + 1) * vocab])
            }
            .run();
            let ends = s.req.stop_ids.contains(&sampled.token);
            let feeds = s
                .thinking
                .as_ref()
                .is_none_or(|t| t.feeds_grammar(sampled.token));
            if let Some(g) = &mut s.guide
                && !ends
                && feeds
                && let Err(e) = g.commit(sampled.token)
            {
                // The mask allowed it, so this does not happen; should it, the token is
                // not kept and the sequence ends with the grammar's error next step.
                s.grammar_error = Some(e);
                s.computed -= 1;
                accepted -= 1;
                break;
            }
            progress = s.accept(
                sampled,
                &self.tok,
                self.config.context,
                &self.version,
                &self.metrics,
            );
            if progress == Progress::Finished {
                break;
            }
        }
        s.drafter
            .record(draft.len(), accepted, self.config.spec_tokens);
        self.metrics.spec_drafted.inc_by(draft.len() as u64);
        self.metrics.spec_accepted.inc_by(accepted as u64);
        self.metrics.spec_accepted_length.observe(accepted as f64);
        if self.config.prefix_reuse && progress == Progress::Running {
            self.cache
                .borrow_mut()
                .publish(s.lease.slot(), |p| s.token_at(p), s.computed);
        }
        progress
    }
}
