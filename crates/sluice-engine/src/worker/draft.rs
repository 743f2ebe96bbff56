//! The drafts a step verifies (docs/ARCHITECTURE.md, "Speculative decoding"): from each
//! sequence's own context (`spec::Drafter`, prompt lookup), or from a second, smaller
//! model with the same vocabulary (`--draft-model`), which runs its own batched passes
//! over its own KV slab before the step: the tokens it has not seen yet (a prefill
//! bounded by the step's budget), then one row per sequence per drafted token, greedy.
//! Either way a draft is a guess that verification keeps or drops; it never changes a
//! token.

use super::Worker;
use crate::kv::{KvSlab, TokenRow};
use crate::model::Model;
use crate::sampling::best;

/// A draft model and its KV slab: one region of `context` positions per slot, written in
/// place like the main pool's blocks (a sequence's positions are rewritten as it goes;
/// `Sequence::draft_seen` says how many are valid).
pub(crate) struct DraftModel {
    model: Box<dyn Model>,
    kv: KvSlab,
    logits: Vec<f32>,
}

impl DraftModel {
    pub(crate) fn new(model: Box<dyn Model>, slots: usize, context: usize) -> Self {
        let s = model.shape();
        let kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, slots, context);
        Self {
            model,
            kv,
            logits: Vec::new(),
        }
    }

    /// Runs `rows`; the argmax token of each row in `want`, in order.
    fn greedy(&mut self, rows: &[TokenRow], want: &[usize]) -> Vec<u32> {
        if rows.is_empty() {
            return Vec::new();
        }
        self.model
            .forward_into(&mut self.kv, rows, want, &mut self.logits);
        let vocab = self.model.shape().vocab;
        self.logits
            .chunks_exact(vocab)
            .map(|row| best(row, 1)[0] as u32)
            .collect()
    }
}

impl Worker {
    /// Drafts for the decoding sequences that may speculate this step (`Sequence::draft`):
    /// none for beam searches or while more than `spec_max_batch` sequences decode; never
    /// past `max_tokens` or the context; a constrained sequence's draft is cut where its
    /// grammar would refuse a token.
    pub(super) fn draft(&mut self) {
        let most = self.config.spec_tokens;
        let decoding = self
            .running
            .iter()
            .filter(|s| !s.parked && !s.is_prefilling())
            .count();
        let on = most > 0 && decoding <= self.config.spec_max_batch;
        // (index in `running`, most tokens it may draft)
        let mut want = Vec::new();
        for (i, s) in self.running.iter_mut().enumerate() {
            s.draft.clear();
            // The draft slab's positions hold final tokens only up to the last one known
            // (drafts written after it were kept or dropped by the last verification).
            let last = s.req.prompt.len() + s.generated() - 1;
            s.draft_seen = s.draft_seen.min(last);
            let thinking_blocks = s.thinking.as_ref().is_some_and(|t| !t.may_draft());
            if !on || s.parked || s.is_prefilling() || s.beams.is_some() || thinking_blocks {
                continue;
            }
            let g = s.generated();
            let len = s.req.prompt.len() + g;
            // The draft's last row sits at position len - 1 + k and yields token g + 1 + k.
            let room = (s.req.max_tokens.saturating_sub(g + 1))
                .min(self.config.context.saturating_sub(len))
                .min(most);
            if self.draft_model.is_none() {
                let mut drafter = std::mem::take(&mut s.drafter);
                s.draft = drafter.propose(len, |i| s.token_at(i), room);
                s.drafter = drafter;
            } else {
                want.push((i, room));
            }
        }
        if !want.is_empty() {
            self.model_drafts(&want);
        }
        for s in &mut self.running {
            // Inside a thinking section the grammar does not apply yet; a draft that
            // crosses into the answer is cut where the section could end.
            if s.guide.is_some() && !s.draft.is_empty() && !s.grammar_on() {
                s.draft.clear();
            }
            if let Some(g) = s.guide.as_mut().filter(|_| !s.draft.is_empty()) {
                // The matcher stands after the last token; the drafts follow it. End
                // tokens are never drafted into a grammar (its own mask decides them).
                let ends = &s.req.stop_ids;
                let plain = s.draft.iter().take_while(|t| !ends.contains(t)).count();
                let ok = g.matcher.validate_tokens(&s.draft[..plain]).unwrap_or(0);
                s.draft.truncate(ok);
            }
        }
    }

    /// Drafts from the draft model for `want` (see the module documentation).
    fn model_drafts(&mut self, want: &[(usize, usize)]) {
        let Some(dm) = self.draft_model.as_mut() else {
            return;
        };
        // First the tokens each sequence's draft slab lacks (its last token included: its
        // row gives the first draft), within the step's budget; a sequence that cannot
        // catch up this step drafts nothing and catches up on the rest next step.
        let mut budget = self.config.max_batch_tokens;
        let (mut rows, mut firsts) = (Vec::new(), Vec::new());
        // (index in `running`, tokens to draft)
        let mut drafting: Vec<(usize, usize)> = Vec::new();
        for &(i, room) in want {
            let s = &mut self.running[i];
            let len = s.req.prompt.len() + s.generated();
            let k = s.drafter.budget(room);
            let from = s.draft_seen.min(len);
            let fed = (len - from).min(budget);
            budget -= fed;
            let slot = s.lease.slot();
            rows.extend((from..from + fed).map(|pos| TokenRow {
                token: s.token_at(pos),
                slot,
                pos,
            }));
            s.draft_seen = from + fed;
            if fed > 0 && from + fed == len && k > 0 {
                firsts.push(rows.len() - 1);
                drafting.push((i, k));
            }
        }
        for (&(i, _), t) in drafting.iter().zip(dm.greedy(&rows, &firsts)) {
            self.running[i].draft.push(t);
        }
        // Then one row per drafting sequence per further token.
        let longest = drafting.iter().map(|d| d.1).max().unwrap_or(0);
        for j in 1..longest {
            let live: Vec<usize> = drafting.iter().filter(|d| d.1 > j).map(|d| d.0).collect();
            let rows: Vec<TokenRow> = live
                .iter()
                .map(|&i| {
                    let s = &self.running[i];
                    let len = s.req.prompt.len() + s.generated();
                    TokenRow {
                        token: *s.draft.last().expect("a first draft"),
                        slot: s.lease.slot(),
                        pos: len - 1 + j,
                    }
                })
                .collect();
            let all: Vec<usize> = (0..rows.len()).collect();
            for (&i, t) in live.iter().zip(dm.greedy(&rows, &all)) {
                let s = &mut self.running[i];
                s.draft.push(t);
                s.draft_seen += 1;
            }
        }
    }
}
