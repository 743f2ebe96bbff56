//! Beam search (docs/ARCHITECTURE.md, "Beam search"): `width` beams in `width` slots of
//! their own, extended by the best candidates of all beams each step, deterministic. Pure
//! bookkeeping: the worker runs the rows and copies the slots this module asks for.

use crate::request::{BeamOut, BeamSpec, FinishReason, TokenEvent};
use crate::stops::first_stop;
use crate::tokenizer::Tokenizer;

/// One live beam: its slot and tokens after the prompt.
#[derive(Clone, Debug)]
pub(crate) struct Beam {
    pub slot: usize,
    pub tokens: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub cum: f64,
}

/// A finished hypothesis.
#[derive(Clone, Debug)]
struct Hypothesis {
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    text: String,
    reason: FinishReason,
    score: f64,
    /// Its last token is an end token (counted, not shown).
    ended: bool,
}

/// The search's state, owned by the sequence that prefilled the prompt.
pub(crate) struct BeamSearch {
    pub spec: BeamSpec,
    /// Every slot of the group (the sequence's own first).
    pub slots: Vec<usize>,
    pub live: Vec<Beam>,
    done: Vec<Hypothesis>,
}

/// A slot copy the worker must make before the next step: positions `0..len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Copy {
    pub from: usize,
    pub to: usize,
    pub len: usize,
}

/// What the request's other limits are.
pub(crate) struct Limits<'a> {
    pub prompt_len: usize,
    pub max_tokens: usize,
    pub context: usize,
    pub stop_ids: &'a [u32],
    pub stop_strings: &'a [String],
}

/// `log_softmax` of one row in f64: its log-normaliser.
fn log_normaliser(row: &[f32]) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max + row
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
}

impl BeamSearch {
    /// A search over `slots` (`slots[0]` holds the prefilled prompt).
    pub fn new(spec: BeamSpec, slots: Vec<usize>) -> Self {
        let live = vec![Beam {
            slot: slots[0],
            tokens: Vec::new(),
            logprobs: Vec::new(),
            cum: 0.0,
        }];
        Self {
            spec,
            slots,
            live,
            done: Vec::new(),
        }
    }

    fn score(&self, cum: f64, len: usize) -> f64 {
        cum / (len.max(1) as f64).powf(self.spec.length_penalty as f64)
    }

    /// Extends the live beams with one logits row each (in `live` order). Returns the slot
    /// copies the new beams need; afterwards `live` holds the beams to run next, and the
    /// search is over when it is empty.
    pub fn advance(&mut self, rows: &[&[f32]], tok: &Tokenizer, lim: &Limits) -> Vec<Copy> {
        let w = self.spec.width;
        // Every beam's best 2w continuations: (cumulative logprob, beam, token, logprob).
        let mut cands = Vec::new();
        for (b, row) in rows.iter().enumerate() {
            let lse = log_normaliser(row);
            for t in crate::sampling::best(row, 2 * w) {
                let lp = row[t] as f64 - lse;
                cands.push((self.live[b].cum + lp, b, t as u32, lp as f32));
            }
        }
        cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut next: Vec<(usize, Beam)> = Vec::new();
        for (rank, &(cum, parent, token, lp)) in cands.iter().enumerate() {
            if next.len() == w || self.done.len() >= w {
                break;
            }
            let p = &self.live[parent];
            let mut tokens = p.tokens.clone();
            tokens.push(token);
            let mut logprobs = p.logprobs.clone();
            logprobs.push(lp);
            let ends = lim.stop_ids.contains(&token);
            if ends && rank >= w {
                continue;
            }
            let shown = if ends {
                &tokens[..tokens.len() - 1]
            } else {
                &tokens[..]
            };
            let text = tok.decode(shown).unwrap_or_default();
            let cut = first_stop(&text, lim.stop_strings);
            let full =
                tokens.len() >= lim.max_tokens || lim.prompt_len + tokens.len() >= lim.context;
            if ends || cut.is_some() || full {
                let reason = if ends || cut.is_some() {
                    FinishReason::Stop
                } else {
                    FinishReason::Length
                };
                let len = lim.prompt_len + shown.len();
                let score = self.score(cum, len);
                let text = cut.map_or(text.clone(), |at| text[..at].to_string());
                self.done.push(Hypothesis {
                    tokens,
                    logprobs,
                    text,
                    reason,
                    score,
                    ended: ends,
                });
                continue;
            }
            next.push((
                parent,
                Beam {
                    slot: usize::MAX,
                    tokens,
                    logprobs,
                    cum,
                },
            ));
        }
        if self.done.len() >= w {
            next.clear();
        }
        // Slots: a parent's first child keeps its slot (its keys are already there); the
        // other children take slots no child inherits and get the parent's prefix copied.
        let parent_slot: Vec<usize> = self.live.iter().map(|b| b.slot).collect();
        let mut inherited = vec![false; parent_slot.len()];
        let mut copies = Vec::new();
        let mut needs_slot = Vec::new();
        for (i, (parent, beam)) in next.iter_mut().enumerate() {
            if !inherited[*parent] {
                inherited[*parent] = true;
                beam.slot = parent_slot[*parent];
            } else {
                needs_slot.push(i);
            }
        }
        let taken: Vec<usize> = next.iter().map(|(_, b)| b.slot).collect();
        let mut spare = self.slots.iter().copied().filter(|s| !taken.contains(s));
        for i in needs_slot {
            let (parent, beam) = &mut next[i];
            beam.slot = spare.next().expect("a group has a slot per beam");
            copies.push(Copy {
                from: parent_slot[*parent],
                to: beam.slot,
                len: lim.prompt_len + beam.tokens.len() - 1,
            });
        }
        self.live = next.into_iter().map(|(_, b)| b).collect();
        copies
    }

    /// The `n` best hypotheses, best first.
    pub fn results(mut self) -> Vec<BeamOut> {
        self.done.sort_by(|a, b| b.score.total_cmp(&a.score));
        self.done
            .into_iter()
            .take(self.spec.n)
            .map(|h| BeamOut {
                text: h.text,
                tokens: h
                    .tokens
                    .iter()
                    .zip(&h.logprobs)
                    .enumerate()
                    .map(|(i, (&id, &logprob))| TokenEvent {
                        id,
                        text: String::new(),
                        logprob: Some(logprob),
                        top: Vec::new(),
                        is_end: h.ended && i + 1 == h.tokens.len(),
                        weights_version: None,
                    })
                    .collect(),
                reason: h.reason,
                score: h.score,
            })
            .collect()
    }
}
