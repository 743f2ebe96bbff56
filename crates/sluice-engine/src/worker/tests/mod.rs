//! The engine loop with the fake model: admission in bucket batches, slot refill,
//! cancellation, weight swap, timeouts, engine death and the idle signal. The fake model
//! holds its first forward call until the test releases it, so requests are queued
//! deterministically, without sleeping for the worker.

mod beam;
mod constraint;
mod pool;
mod prefill;
mod spec;

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::model::fake::{FakeModel, PANIC_TOKEN, VOCAB};
use crate::model::{Model, TokenRow};
use crate::{EngineConfig, EngineError, EngineHandle, Event, EventStream, ReloadMode};
use crate::{FinishReason, Tokenizer, ValidRequest};

pub(crate) fn tokenizer() -> Arc<Tokenizer> {
    use tokenizers::models::wordlevel::WordLevel;
    let vocab: HashMap<String, u32> = (0..VOCAB as u32).map(|i| (format!("t{i}"), i)).collect();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("t0".into())
        .build()
        .unwrap();
    Arc::new(Tokenizer::new(
        tokenizers::Tokenizer::new(model),
        Vec::new(),
    ))
}

pub(crate) type Calls = Arc<Mutex<Vec<Vec<TokenRow>>>>;

/// An engine on a fake model of `step` whose first forward call holds the engine thread
/// until released.
pub(crate) struct Held {
    pub e: EngineHandle,
    pub calls: Calls,
    entered: Receiver<()>,
    pub release: Sender<()>,
}

impl Held {
    /// Submits `first` and waits until the engine thread is held inside its prefill:
    /// whatever is submitted next is queued together.
    pub(crate) fn hold(&self, first: ValidRequest) -> EventStream {
        let rx = self.e.submit(first).unwrap();
        self.entered.recv().unwrap();
        rx
    }
}

pub(crate) fn engine(step: u32, config: EngineConfig) -> Held {
    engine_held_at(0, step, config)
}

/// As `engine`, holding forward call number `at` instead of the first.
pub(crate) fn engine_held_at(at: usize, step: u32, config: EngineConfig) -> Held {
    engine_of(FakeModel::new(step), at, config)
}

/// As `engine_held_at`, on a given fake model.
pub(crate) fn engine_of(model: FakeModel, at: usize, config: EngineConfig) -> Held {
    let (release, gate) = channel();
    let (entered_tx, entered) = channel();
    let model = model.held(at, entered_tx, gate);
    let calls = model.calls.clone();
    let e = EngineHandle::start(Box::new(model), tokenizer(), config);
    Held {
        e,
        calls,
        entered,
        release,
    }
}

pub(crate) fn config(slots: usize) -> EngineConfig {
    EngineConfig {
        slots,
        context: 64,
        min_bucket: 16,
        // The policy tests count rows per step; speculation has its own (`spec.rs`).
        spec_tokens: 0,
        ..EngineConfig::default()
    }
}

/// Every event of a stream until it ends: token ids, and the final event.
pub(crate) fn drain(mut rx: EventStream) -> (Vec<u32>, Option<Event>) {
    let mut ids = Vec::new();
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            Event::Token(t) => ids.push(t.id),
            end => return (ids, Some(end)),
        }
    }
    (ids, None)
}

/// Blocks until the engine says no request is queued or running (30 s at most).
pub(crate) fn wait_idle(e: &EngineHandle) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), e.idle())
            .await
            .expect("the engine goes idle")
    });
}

pub(crate) fn chain(from: u32, step: u32, n: usize) -> Vec<u32> {
    (1..=n as u32)
        .map(|i| (from + i * step) % VOCAB as u32)
        .collect()
}

pub(crate) fn prompts_of(call: &[TokenRow]) -> Vec<(usize, usize)> {
    // (slot, rows) per slot, in order of appearance.
    let mut out: Vec<(usize, usize)> = Vec::new();
    for r in call {
        match out.last_mut() {
            Some((s, n)) if *s == r.slot => *n += 1,
            _ => out.push((r.slot, 1)),
        }
    }
    out
}

#[test]
fn queued_requests_are_prefilled_in_bucket_batches() {
    let h = engine(1, config(8));
    let blocker = h.hold(ValidRequest::greedy(vec![1], 3));
    let (e, calls, release) = (&h.e, &h.calls, &h.release);
    let a = e.submit(ValidRequest::greedy(vec![2; 3], 2)).unwrap();
    let b = e.submit(ValidRequest::greedy(vec![3; 20], 2)).unwrap();
    let c = e.submit(ValidRequest::greedy(vec![4; 5], 2)).unwrap();
    release.send(()).unwrap();
    for (rx, last, n) in [(blocker, 1, 3), (a, 2, 2), (b, 3, 2), (c, 4, 2)] {
        let (ids, end) = drain(rx);
        assert_eq!(ids, chain(last, 1, n));
        assert!(matches!(end, Some(Event::Done(f)) if f.reason == FinishReason::Length));
    }
    let calls = calls.lock().unwrap();
    // The blocker's prefill; then, in one step, its decode row first and the three
    // prompts admitted in bucket groups: a and c (bucket 16) take slots 1 and 2, then b
    // (bucket 32) slot 3; then one decode step for all four.
    assert_eq!(prompts_of(&calls[0]), vec![(0, 1)]);
    assert_eq!(prompts_of(&calls[1]), vec![(0, 1), (1, 3), (2, 5), (3, 20)]);
    assert_eq!(
        calls[2].len(),
        4,
        "one decode step for every running sequence"
    );
    let admitted = |b: &str| e.metrics().prefill_requests.with_label_values(&[b]).get();
    assert_eq!((admitted("16"), admitted("32")), (3, 1));
}

#[test]
fn a_freed_slot_is_refilled_between_steps() {
    let h = engine(1, config(2));
    let a = h.hold(ValidRequest::greedy(vec![1], 3));
    let (e, calls, release) = (&h.e, &h.calls, &h.release);
    let b = e.submit(ValidRequest::greedy(vec![5], 6)).unwrap();
    let c = e.submit(ValidRequest::greedy(vec![20, 20], 3)).unwrap();
    release.send(()).unwrap();
    assert_eq!(drain(a).0, chain(1, 1, 3));
    assert_eq!(drain(b).0, chain(5, 1, 6));
    assert_eq!(drain(c).0, chain(20, 1, 3));
    let calls = calls.lock().unwrap();
    let c_prefill = calls
        .iter()
        .position(|call| call.iter().any(|r| r.token == 20))
        .expect("c was prefilled");
    // a (slot 0) runs its prefill; then b takes slot 1 and c waits; a finishes in a
    // step it shares with b, and c takes slot 0 at the next step while b still runs.
    let c_row = calls[c_prefill].iter().find(|r| r.token == 20).unwrap();
    assert_eq!(c_row.slot, 0);
    assert!(calls[..c_prefill].iter().any(|call| call.len() == 2));
    assert!(calls[c_prefill + 1..].iter().any(|call| call.len() == 2));
}

#[test]
fn cancelled_requests_free_their_slot_or_never_run() {
    // Step 0: the long request repeats its token, so no other prompt's token appears.
    // The engine is held in its first decode step (call 1), after the prefill's token.
    let h = engine_held_at(1, 0, config(4));
    let mut long = h.hold(ValidRequest::greedy(vec![1], 60));
    let (e, calls, release) = (&h.e, &h.calls, &h.release);
    let gone = e.submit(ValidRequest::greedy(vec![7, 7, 7], 5)).unwrap();
    drop(gone);
    assert!(matches!(long.blocking_recv(), Some(Event::Token(_))));
    drop(long);
    release.send(()).unwrap();
    wait_idle(e);
    assert_eq!(e.waiting(), 0);
    let calls = calls.lock().unwrap();
    assert_eq!(
        calls.len(),
        2,
        "the long request's prefill and the decode step it was in when its client left"
    );
    assert!(
        calls.iter().flatten().all(|r| r.token != 7),
        "a request cancelled while queued is never prefilled"
    );
    let cancelled = e
        .metrics()
        .requests
        .with_label_values(&["engine", "cancelled"])
        .get();
    assert_eq!(cancelled, 2);
}

#[test]
fn a_wait_reload_lets_running_sequences_finish_on_the_old_model() {
    let h = engine(1, config(4));
    let a = h.hold(ValidRequest::greedy(vec![1], 5));
    let (e, release) = (&h.e, &h.release);
    let swapped = e
        .reload(Box::new(FakeModel::new(2)), "v2".into(), ReloadMode::Wait)
        .unwrap();
    let b = e.submit(ValidRequest::greedy(vec![1], 5)).unwrap();
    release.send(()).unwrap();
    let (ids, end) = drain(a);
    assert_eq!(ids, chain(1, 1, 5), "a ran on the old model throughout");
    assert!(matches!(end, Some(Event::Done(f)) if f.weights_version == "v1"));
    let (ids, end) = drain(b);
    assert_eq!(ids, chain(1, 2, 5), "b ran on the new model throughout");
    assert!(matches!(end, Some(Event::Done(f)) if f.weights_version == "v2"));
    let report = swapped.blocking_recv().expect("the swap is reported");
    assert_eq!(report.old.shape().arch, "fake");
    assert_eq!(report.aborted, 0);
    assert_eq!(&*e.weights_version(), "v2");
}

#[test]
fn an_abort_reload_ends_running_sequences_with_their_own_error() {
    let h = engine(1, config(4));
    let a = h.hold(ValidRequest::greedy(vec![1], 20));
    let (e, release) = (&h.e, &h.release);
    let swapped = e
        .reload(Box::new(FakeModel::new(2)), "v2".into(), ReloadMode::Abort)
        .unwrap();
    release.send(()).unwrap();
    let (ids, end) = drain(a);
    assert!(ids.len() < 20);
    assert_eq!(end, Some(Event::Error(EngineError::Aborted)));
    assert_eq!(swapped.blocking_recv().unwrap().aborted, 1);
}

#[test]
fn requests_past_the_deadline_end_with_a_timeout() {
    let mut cfg = config(4);
    cfg.request_timeout = Some(Duration::from_millis(50));
    let h = engine(1, cfg);
    let a = h.e.submit(ValidRequest::greedy(vec![1], 20)).unwrap();
    let release = &h.release;
    // The first forward call is held past the deadline, so the request has expired by
    // the next step boundary whatever the scheduling.
    std::thread::sleep(Duration::from_millis(100));
    release.send(()).unwrap();
    let (ids, end) = drain(a);
    assert_eq!(
        ids.len(),
        1,
        "the token of the held prefill, then the deadline at the next step boundary"
    );
    assert_eq!(end, Some(Event::Error(EngineError::TimedOut(0.05))));
}

#[test]
fn an_engine_panic_is_visible_before_any_client_hears_of_it() {
    let h = engine(1, config(4));
    let a = h.hold(ValidRequest::greedy(vec![2], 20));
    let (e, release) = (&h.e, &h.release);
    let b = e
        .submit(ValidRequest::greedy(vec![PANIC_TOKEN], 3))
        .unwrap();
    release.send(()).unwrap();
    for rx in [a, b] {
        let (_, end) = drain(rx);
        assert!(
            !e.is_alive(),
            "the handle says dead before the client hears"
        );
        assert!(matches!(end, None | Some(Event::Error(EngineError::Died))));
    }
    assert_eq!(
        e.submit(ValidRequest::greedy(vec![1], 1)).unwrap_err(),
        crate::SubmitError::EngineDown
    );
}

#[test]
fn the_queue_limits_refuse_at_once_and_every_path_releases_its_place() {
    let mut cfg = config(1);
    cfg.max_queued = 2;
    cfg.max_queued_tokens = 10;
    let h = engine(1, cfg);
    let blocker = h.hold(ValidRequest::greedy(vec![1], 3));
    let e = &h.e;
    let b = e.submit(ValidRequest::greedy(vec![2; 6], 3)).unwrap();
    assert_eq!(
        e.submit(ValidRequest::greedy(vec![3; 5], 3)).unwrap_err(),
        crate::SubmitError::QueuedTokens(10),
        "6 + 5 prompt tokens exceed the budget of 10"
    );
    let c = e.submit(ValidRequest::greedy(vec![3; 4], 3)).unwrap();
    assert_eq!(e.waiting(), 2);
    assert_eq!(
        e.submit(ValidRequest::greedy(vec![4], 3)).unwrap_err(),
        crate::SubmitError::QueueFull(2)
    );
    drop(c);
    h.release.send(()).unwrap();
    drain(blocker);
    drain(b);
    wait_idle(e);
    assert_eq!(e.waiting(), 0);
    let model: &dyn Model = &FakeModel::new(1);
    assert_eq!(model.shape().vocab, VOCAB);
}

#[test]
fn a_token_carries_its_logprob_only_when_the_request_needs_it() {
    let h = engine(1, config(4));
    let plain = h.hold(ValidRequest::greedy(vec![1], 3));
    let mut asked = ValidRequest::greedy(vec![2], 3);
    asked.logprobs = Some(0);
    let mut ranked = ValidRequest::greedy(vec![3], 3);
    ranked.rank_by_logprob = true;
    let (asked, ranked) = (h.e.submit(asked).unwrap(), h.e.submit(ranked).unwrap());
    h.release.send(()).unwrap();
    for (mut rx, computed) in [(plain, false), (asked, true), (ranked, true)] {
        let mut tokens = 0;
        while let Some(ev) = rx.blocking_recv() {
            if let Event::Token(t) = ev {
                assert_eq!(t.logprob.is_some(), computed, "{t:?}");
                assert!(t.logprob.is_none_or(|l| l <= 0.0));
                tokens += 1;
            }
        }
        assert_eq!(tokens, 3);
    }
}
