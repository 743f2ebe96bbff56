//! A running sequence: its slot lease, sampling history, detokeniser and stop state.

use std::time::Instant;

use crate::constraint::Guide;
use crate::handle::EventSender;
use crate::metrics::Metrics;
use crate::request::{Event, Finish, FinishReason, TokenEvent, ValidRequest};
use crate::sampling::{History, Sampled};
use crate::slots::SlotLease;
use crate::stops::{Release, StopText};
use crate::tokenizer::{IncrementalDecoder, Tokenizer};

/// One sequence occupying a slot.
pub(crate) struct Sequence {
    /// The request.
    pub req: ValidRequest,
    /// Where its events go; closed when the client left.
    pub(crate) tx: EventSender,
    /// The slab row it owns; dropping the sequence frees it.
    pub lease: SlotLease,
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
    /// The grammar's matcher, for constrained requests.
    pub(crate) guide: Option<Guide>,
    /// Why its grammar failed while computing the next mask.
    pub(crate) grammar_error: Option<String>,
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
    /// A sequence for `req` in the leased slot.
    pub(crate) fn new(
        req: ValidRequest,
        tx: EventSender,
        lease: SlotLease,
        submitted: Instant,
    ) -> Self {
        let history = History {
            prompt: req.prompt.clone(),
            generated: Vec::new(),
        };
        let guide = req.constraint.as_ref().map(Guide::new);
        Self {
            guide,
            grammar_error: None,
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
        }
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> usize {
        self.history.generated.len()
    }

    /// Position of the next token to feed: the last generated one.
    pub fn last_position(&self) -> usize {
        self.req.prompt.len() + self.generated() - 1
    }

    /// Records a sampled token, sends its event and, if the sequence is done, the final
    /// event. `context` is the slab's positions per slot.
    pub fn accept(
        &mut self,
        s: Sampled,
        tok: &Tokenizer,
        context: usize,
        version: &str,
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
            let stops: &[String] = if may_stop {
                &self.req.stop_strings
            } else {
                &[]
            };
            match self.stop.push(&delta, stops) {
                Release::Stopped(t) => {
                    finish = Some(FinishReason::Stop);
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
        };
        self.tx.send(Event::Token(ev));
        match finish {
            Some(reason) => {
                metrics.e2e.observe((now - self.submitted).as_secs_f64());
                metrics.prompt_tokens.observe(self.req.prompt.len() as f64);
                metrics.generation_tokens.observe(n as f64);
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
                }));
                Progress::Finished
            }
            None => Progress::Running,
        }
    }
}
