//! A running sequence: its slot lease, sampling history, detokeniser and stop state.

use std::time::Instant;

use crate::beam::BeamSearch;
use crate::constraint::Guide;
use crate::metrics::Metrics;
use crate::protocol::EventSender;
use crate::request::{Event, Finish, FinishReason, PromptToken, TokenEvent, ValidRequest};
use crate::sampling::{History, Sampled};
use crate::slots::SlotLease;
use crate::stops::{Release, StopText};
use crate::thinking::Thinking;
use crate::tokenizer::{IncrementalDecoder, Tokenizer};

/// One sequence occupying a slot.
pub(crate) struct Sequence {
    /// The block table it owns; dropping the sequence frees it. Declared first, so it is
    /// dropped (the slot freed) before `tx` ends the request's count in flight.
    pub lease: SlotLease,
    /// A beam search's other slots, freed with it.
    pub(crate) extra: Vec<SlotLease>,
    /// A beam search's state.
    pub(crate) beams: Option<BeamSearch>,
    /// The request.
    pub req: ValidRequest,
    /// Where its events go; closed when the client left.
    pub(crate) tx: EventSender,
    /// Prompt and generated ids for the penalties.
    pub history: History,
    /// When the request arrived.
    pub submitted: Instant,
    /// When it got its slot.
    admitted: Instant,
    /// When its first and last tokens were produced.
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    decoder: IncrementalDecoder,
    stop: StopText,
    /// The stop string that ended the sequence, if one did.
    matched_stop: Option<String>,
    /// The grammar's matcher, for constrained requests.
    pub(crate) guide: Option<Guide>,
    /// Why its grammar failed while computing the next mask.
    pub(crate) grammar_error: Option<String>,
    /// Positions of its slot whose keys and values are written (reused or computed).
    pub computed: usize,
    /// Preempted: it holds no blocks and waits to compute its tokens again.
    pub parked: bool,
    /// Its n-gram index for drafting, and the draft this step verifies (speculative
    /// decoding: tokens that may follow its last sampled one).
    pub(crate) drafter: crate::spec::Drafter,
    pub(crate) draft: Vec<u32>,
    /// Positions of its slot in the draft model's slab that hold its tokens (`--draft-model`).
    pub(crate) draft_seen: usize,
    /// Tokens of the hypotheses a beam search returned (its completion tokens).
    beam_tokens: usize,
    /// The prompt's log-probabilities so far, when asked for.
    pub prompt_scores: Vec<PromptToken>,
    /// Where it stands in a reasoning model's thinking section.
    pub(crate) thinking: Option<Thinking>,
}

/// Whether a sequence goes on after a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// It needs another decode step.
    Running,
    /// It finished (its final events have been sent).
    Finished,
}

impl Sequence {
    /// A sequence for `req` in the leased slot, whose first `reuse` prompt positions are
    /// already in the slot.
    pub(crate) fn new(
        req: ValidRequest,
        tx: EventSender,
        lease: SlotLease,
        submitted: Instant,
        reuse: usize,
    ) -> Self {
        let history = History {
            prompt: req.prompt.clone(),
            generated: Vec::new(),
        };
        let guide = req.constraint.as_ref().map(Guide::new);
        let thinking = req.thinking.clone().map(Thinking::new);
        let prompt_scores = match req.prompt_logprobs {
            Some(_) => vec![PromptToken {
                id: req.prompt[0],
                logprob: None,
                rank: 0,
                top: Vec::new(),
            }],
            None => Vec::new(),
        };
        Self {
            extra: Vec::new(),
            beams: None,
            guide,
            grammar_error: None,
            computed: reuse,
            parked: false,
            beam_tokens: 0,
            drafter: Default::default(),
            draft: Vec::new(),
            draft_seen: 0,
            prompt_scores,
            thinking,
            req,
            tx,
            lease,
            history,
            submitted,
            admitted: Instant::now(),
            first_token: None,
            last_token: None,
            decoder: IncrementalDecoder::default(),
            stop: StopText::default(),
            matched_stop: None,
        }
    }

    /// Rows it needs in the next step: the rest of its prompt, or one per live beam, or one.
    pub fn rows_wanted(&self) -> usize {
        if self.is_prefilling() {
            return self.prefill_end() - self.computed;
        }
        self.beams.as_ref().map_or(1, |b| b.live.len())
    }

    /// Where its prefill ends: the prompt's end, or, after a preemption, the position of
    /// its last sampled token (the next decode row computes that one).
    pub fn prefill_end(&self) -> usize {
        self.req.prompt.len() + self.generated().saturating_sub(1)
    }

    /// Whether its prefill computes positions it has computed before (after a
    /// preemption): such rows want no logits.
    pub fn recomputes(&self) -> bool {
        self.generated() > 0
    }

    /// The token at position `pos`: the prompt's, then the generated ones.
    pub fn token_at(&self, pos: usize) -> u32 {
        let n = self.req.prompt.len();
        if pos < n {
            self.req.prompt[pos]
        } else {
            self.history.generated[pos - n]
        }
    }

    /// Gives its computed positions up (preemption): it computes them again once it has
    /// blocks. Prompt log-probabilities gathered so far are dropped with them.
    pub fn park(&mut self) {
        self.parked = true;
        self.computed = 0;
        if self.req.prompt_logprobs.is_some() && self.generated() == 0 {
            self.prompt_scores.truncate(1);
        }
    }

    /// Ends a beam search: its results, then the final event.
    pub(crate) fn finish_beams(&mut self, version: &str, metrics: &Metrics) {
        let Some(search) = self.beams.take() else {
            return;
        };
        let out = search.results();
        let reason = out.first().map_or(FinishReason::Length, |b| b.reason);
        let n: usize = out.iter().map(|b| b.tokens.len()).sum();
        metrics.generation_tokens_total.inc_by(n as u64);
        self.tx.send(Event::Beams(out));
        let now = Instant::now();
        self.first_token.get_or_insert(now);
        self.beam_tokens = n;
        self.finish(reason, now, version, metrics);
    }

    /// Whether prompt (or recompute) positions remain to be computed.
    pub fn is_prefilling(&self) -> bool {
        self.computed < self.prefill_end()
    }

    /// Sends the prompt's log-probabilities once they are complete; a request that asked
    /// for no tokens (`max_tokens` 0) then finishes. Returns whether it goes on.
    pub fn prompt_done(&mut self, version: &str, metrics: &Metrics) -> Progress {
        if self.req.prompt_logprobs.is_some() {
            let scores = std::mem::take(&mut self.prompt_scores);
            self.tx.send(Event::Prompt(scores));
        }
        if self.req.max_tokens > 0 {
            return Progress::Running;
        }
        let now = Instant::now();
        self.first_token = Some(now);
        self.finish(FinishReason::Length, now, version, metrics);
        Progress::Finished
    }

    /// Whether its grammar's mask applies to the next token (not inside its thinking).
    pub(crate) fn grammar_on(&self) -> bool {
        self.thinking.as_ref().is_none_or(Thinking::grammar_on)
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> usize {
        self.history.generated.len()
    }

    /// Records a sampled token, sends its event and, if the sequence is done, the final
    /// event. `context` is the slab's positions per slot.
    pub fn accept(
        &mut self,
        s: Sampled,
        tok: &Tokenizer,
        context: usize,
        version: &std::sync::Arc<str>,
        metrics: &Metrics,
    ) -> Progress {
        let now = Instant::now();
        match self.last_token {
            None => metrics.ttft.observe((now - self.submitted).as_secs_f64()),
            Some(t) => metrics.itl.observe((now - t).as_secs_f64()),
        }
        self.last_token = Some(now);
        self.first_token.get_or_insert(now);
        metrics.generation_tokens_total.inc();
        self.history.generated.push(s.token);
        let n = self.generated();
        let may_stop = n > self.req.min_tokens;
        let is_end = may_stop && self.req.stop_ids.contains(&s.token);
        let mut finish = None;
        let text = if is_end {
            finish = Some(FinishReason::Stop);
            self.decoder.finish(tok);
            self.stop.flush()
        } else {
            let delta = self.decoder.push(tok, s.token);
            if let Some(t) = &mut self.thinking {
                t.advance(s.token, &delta);
            }
            let stops: &[String] = if may_stop {
                &self.req.stop_strings
            } else {
                &[]
            };
            match self.stop.push(&delta, stops) {
                Release::Stopped(t) => {
                    finish = Some(FinishReason::Stop);
                    self.matched_stop = self.stop.matched(stops).cloned();
                    t
                }
                Release::Text(t) => t,
            }
        };
        let out_of_room = n >= self.req.max_tokens || self.req.prompt.len() + n >= context;
        let text = if finish.is_none() && out_of_room {
            finish = Some(FinishReason::Length);
            let rest = self.decoder.finish(tok);
            let mut t = text;
            if let Release::Text(more) = self.stop.push(&rest, &[]) {
                t.push_str(&more);
            }
            t.push_str(&self.stop.flush());
            t
        } else {
            text
        };
        let ev = TokenEvent {
            id: s.token,
            text,
            logprob: s.logprob,
            top: s.top,
            is_end,
            weights_version: Some(version.clone()),
        };
        self.tx.send(Event::Token(ev));
        match finish {
            Some(reason) => {
                self.finish(reason, now, version, metrics);
                Progress::Finished
            }
            None => Progress::Running,
        }
    }

    /// Sends the final event and counts the request.
    fn finish(&self, reason: FinishReason, now: Instant, version: &str, metrics: &Metrics) {
        let n = self.generated() + self.beam_tokens;
        metrics.e2e.observe((now - self.submitted).as_secs_f64());
        metrics.prompt_tokens.observe(self.req.prompt.len() as f64);
        metrics.generation_tokens.observe(n as f64);
        let reasoning = self.thinking.as_ref().map_or(0, Thinking::tokens);
        metrics.reasoning_tokens_total.inc_by(reasoning as u64);
        metrics
            .requests
            .with_label_values(&[self.req.route, reason.as_str()])
            .inc();
        self.tx.send(Event::Done(Finish {
            reason,
            prompt_tokens: self.req.prompt.len(),
            completion_tokens: n,
            weights_version: version.to_string(),
            seed: self.req.params.seed,
            queue_seconds: (self.admitted - self.submitted).as_secs_f64(),
            ttft_seconds: (self.first_token.unwrap_or(now) - self.submitted).as_secs_f64(),
            stop_string: self.matched_stop.clone(),
            reasoning_tokens: reasoning,
        }));
    }
}
