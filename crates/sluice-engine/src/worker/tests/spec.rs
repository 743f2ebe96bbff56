//! Speculative decoding under the engine loop with the fake models: drafts taken from the
//! context are verified in the step's one forward pass, and every request gets exactly
//! the tokens it gets without speculation, whether its drafts are all right (the chain
//! model copying its prompt), mostly wrong (the summing model, whose rejected rows'
//! keys and values would change every later token if they were ever read), cut by
//! `max_tokens` or an end token, or cancelled (docs/ARCHITECTURE.md, "Speculative
//! decoding").

use super::pool::summed;
use super::{chain, config, drain, engine_of, wait_idle};
use crate::model::fake::{FakeModel, PANIC_TOKEN};
use crate::{EngineConfig, Event, FinishReason, ValidRequest};

fn spec(slots: usize, tokens: usize) -> EngineConfig {
    EngineConfig {
        spec_tokens: tokens,
        context: 128,
        ..config(slots)
    }
}

/// Runs each request alone, in order, and returns its tokens and finish reason.
fn run(
    model: impl Fn() -> FakeModel,
    cfg: EngineConfig,
    reqs: &[ValidRequest],
) -> Vec<(Vec<u32>, FinishReason)> {
    let h = engine_of(model(), usize::MAX, cfg);
    let out = reqs
        .iter()
        .map(|r| {
            let (ids, end) = drain(h.e.submit(r.clone()).unwrap());
            match end {
                Some(Event::Done(f)) => (ids, f.reason),
                other => panic!("unexpected end {other:?}"),
            }
        })
        .collect();
    wait_idle(&h.e);
    assert_eq!(h.e.kv_blocks_used(), 0, "every block came back");
    out
}

/// A prompt that holds the chain the step-2 model continues with: 0, 2, 4, ... 30, 0, ...
/// (even tokens only: never the fake model's panic token).
fn copying(len: usize) -> Vec<u32> {
    chain(30, 2, len)
}

/// Where the step-2 chain goes after `copying(len)`.
fn after(len: usize, n: usize) -> Vec<u32> {
    chain(2 * (len as u32 - 1) % 32, 2, n)
}

#[test]
fn drafts_from_the_prompt_are_accepted_in_few_steps_and_change_nothing() {
    let reqs = [
        ValidRequest::greedy(copying(40), 20),
        ValidRequest::greedy(copying(40), 8),
    ];
    let off = run(|| FakeModel::new(2), spec(2, 0), &reqs);
    let h = engine_of(FakeModel::new(2), usize::MAX, spec(2, 4));
    let (ids, _) = drain(h.e.submit(reqs[0].clone()).unwrap());
    assert_eq!(ids, off[0].0);
    assert_eq!(ids, after(40, 20));
    // A prefill, then steps of five rows (a row and four drafts), all accepted.
    let calls = h.calls.lock().unwrap().clone();
    assert!(
        calls.len() <= 1 + 20usize.div_ceil(5),
        "{} calls",
        calls.len()
    );
    assert!(calls[1..].iter().all(|c| c.len() <= 5));
    // The counters are updated after the last token is sent: read them once idle.
    wait_idle(&h.e);
    let m = h.e.metrics();
    assert!(m.spec_accepted.get() >= 15, "{}", m.spec_accepted.get());
    assert_eq!(m.spec_accepted.get(), m.spec_drafted.get());
    // Drafts stop at max_tokens: exactly 8 tokens (1, then 1 + 4, then 1 + 1), `length`.
    let (ids, end) = drain(h.e.submit(reqs[1].clone()).unwrap());
    assert_eq!(ids, off[1].0);
    assert_eq!(ids.len(), 8);
    assert!(matches!(end, Some(Event::Done(f)) if f.reason == FinishReason::Length));
    wait_idle(&h.e);
    assert_eq!(h.e.kv_blocks_used(), 0);
}

#[test]
fn an_end_token_inside_an_accepted_draft_ends_the_sequence_there() {
    let mut r = ValidRequest::greedy(copying(40), 30);
    r.stop_ids = vec![12];
    let off = run(|| FakeModel::new(2), spec(1, 0), std::slice::from_ref(&r));
    let on = run(|| FakeModel::new(2), spec(1, 8), std::slice::from_ref(&r));
    assert_eq!(on, off);
    assert_eq!(on[0].0.last(), Some(&12));
    assert_eq!(on[0].1, FinishReason::Stop);
}

#[test]
fn rejected_drafts_leave_no_trace_in_the_tokens_or_the_pool() {
    // The summing model's next token depends on every position read back: a rejected
    // draft's keys and values that stayed visible would change what follows. Its own
    // text repeats often enough that drafts are made and mostly rejected.
    // Repeating prompts whose first generated token continues the repetition (so the
    // next step drafts the repetition) and whose second does not (so that draft is
    // rejected), and whose run never meets the panic token.
    let reqs: Vec<ValidRequest> = (0u32..)
        .map(|i| {
            let k = 3 + i as usize % 4;
            let v: Vec<u32> = (0..k as u32).map(|j| (i * 7 + j * 5) % 29 + 1).collect();
            (0..24).map(|j| v[j % k]).collect::<Vec<u32>>()
        })
        .filter(|p| {
            let (out, k) = (
                summed(p, 3, 36),
                p[1..].iter().position(|&t| t == p[0]).unwrap() + 1,
            );
            out[0] == p[24 % k] && out[1] != p[25 % k] && !out.contains(&PANIC_TOKEN)
        })
        .take(6)
        .map(|p| ValidRequest::greedy(p, 36))
        .collect();
    let off = run(|| FakeModel::summing(3), spec(3, 0), &reqs);
    let h = engine_of(FakeModel::summing(3), usize::MAX, spec(3, 6));
    // Together, so drafts and plain decode rows share steps.
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| h.e.submit(r.clone()).unwrap())
        .collect();
    for (rx, (want, _)) in streams.into_iter().zip(&off) {
        assert_eq!(&drain(rx).0, want);
    }
    wait_idle(&h.e);
    let m = h.e.metrics();
    let (d, a) = (m.spec_drafted.get(), m.spec_accepted.get());
    assert!(d > 0, "drafts were made");
    assert!(a < d, "some were rejected: {a} of {d}");
    assert_eq!(h.e.kv_blocks_used(), 0);
}

#[test]
fn a_sequence_cancelled_while_it_drafts_frees_every_block() {
    // Hold the third forward call: the second step that verifies a draft.
    let h = engine_of(FakeModel::new(2), 2, spec(2, 8));
    let rx = h.hold(ValidRequest::greedy(copying(40), 24));
    drop(rx);
    h.release.send(()).unwrap();
    wait_idle(&h.e);
    assert!(h.e.metrics().spec_drafted.get() > 0);
    assert_eq!(h.e.kv_blocks_used(), 0);
    // And the engine goes on: a new request gets its full answer.
    let (ids, _) = drain(h.e.submit(ValidRequest::greedy(copying(40), 10)).unwrap());
    assert_eq!(ids, after(40, 10));
    wait_idle(&h.e);
    assert_eq!(h.e.kv_blocks_used(), 0);
}

#[test]
fn while_more_sequences_decode_than_spec_max_batch_none_drafts() {
    let cfg = EngineConfig {
        spec_max_batch: 1,
        ..spec(2, 4)
    };
    let h = engine_of(FakeModel::new(2), 0, cfg);
    let a = h.hold(ValidRequest::greedy(copying(40), 12));
    let b = h.e.submit(ValidRequest::greedy(copying(41), 24)).unwrap();
    h.release.send(()).unwrap();
    assert_eq!(drain(a).0, after(40, 12));
    assert_eq!(drain(b).0, after(41, 24));
    wait_idle(&h.e);
    let calls = h.calls.lock().unwrap().clone();
    let slot_a = calls[0][0].slot;
    let mut both = 0;
    for c in &calls {
        let a_rows = c.iter().filter(|r| r.slot == slot_a).count();
        let b_decode = c.iter().filter(|r| r.slot != slot_a && r.pos >= 41).count();
        if a_rows > 0 && b_decode > 0 {
            // Both decode: one row each, no drafts.
            both += 1;
            assert_eq!((a_rows, b_decode), (1, 1), "{c:?}");
        }
    }
    assert!(both >= 5, "{both} steps had both decoding");
    // Alone afterwards, b drafted.
    assert!(h.e.metrics().spec_accepted.get() > 0);
}

/// An engine on `target` drafting with `draft` (`--draft-model`).
fn with_draft(target: FakeModel, draft: FakeModel, cfg: EngineConfig) -> crate::EngineHandle {
    let metrics = std::sync::Arc::new(crate::Metrics::new(cfg.slots, "fake"));
    crate::EngineHandle::start_with_draft(
        Box::new(target),
        Some(Box::new(draft)),
        super::tokenizer(),
        cfg,
        metrics,
    )
}

#[test]
fn a_draft_model_that_agrees_has_every_draft_accepted() {
    // Nothing in the prompt repeats: only the draft model can guess.
    let draft = FakeModel::new(2);
    let draft_calls = draft.calls.clone();
    let e = with_draft(FakeModel::new(2), draft, spec(2, 4));
    let (ids, _) = drain(e.submit(ValidRequest::greedy(vec![0, 2, 4], 12)).unwrap());
    assert_eq!(ids, chain(4, 2, 12));
    wait_idle(&e);
    let m = e.metrics();
    assert!(m.spec_drafted.get() >= 8, "{}", m.spec_drafted.get());
    assert_eq!(m.spec_accepted.get(), m.spec_drafted.get());
    // The draft model first saw the prompt and the first token, then one row a pass.
    let calls = draft_calls.lock().unwrap().clone();
    let first: Vec<(u32, usize)> = calls[0].iter().map(|r| (r.token, r.pos)).collect();
    assert_eq!(first, vec![(0, 0), (2, 1), (4, 2), (6, 3)]);
    // Then a pass per further draft (one row), or the last draft kept and the token after
    // it (two rows: the last draft is never fed to it while drafting).
    assert!(calls[1..].iter().all(|c| c.len() <= 2), "{calls:?}");
    assert_eq!(e.kv_blocks_used(), 0);
}

#[test]
fn a_draft_model_that_disagrees_changes_no_token_and_catches_up_within_the_budget() {
    // The summing target against the chain draft: most drafts are wrong. Prompts longer
    // than the step's budget make the draft model catch up over several steps.
    let reqs: Vec<ValidRequest> = (0u32..)
        .map(|i| {
            (0..40)
                .map(|j| (i * 7 + j * 3) % 29 + 1)
                .collect::<Vec<u32>>()
        })
        .filter(|p| !summed(p, 3, 30).contains(&PANIC_TOKEN))
        .take(4)
        .map(|p| ValidRequest::greedy(p, 30))
        .collect();
    let cfg = EngineConfig {
        max_batch_tokens: 24,
        ..spec(3, 6)
    };
    let e = with_draft(FakeModel::summing(3), FakeModel::new(2), cfg);
    let streams: Vec<_> = reqs.iter().map(|r| e.submit(r.clone()).unwrap()).collect();
    for (rx, r) in streams.into_iter().zip(&reqs) {
        assert_eq!(drain(rx).0, summed(&r.prompt, 3, 30));
    }
    wait_idle(&e);
    let m = e.metrics();
    let (d, a) = (m.spec_drafted.get(), m.spec_accepted.get());
    assert!(d > 0 && a < d, "{a} of {d}");
    assert_eq!(e.kv_blocks_used(), 0);
}
