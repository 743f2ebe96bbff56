//! Chunked prefill, prefix reuse, shared prefills and prompt log-probabilities, with the
//! fake model (docs/ARCHITECTURE.md, "Chunked prefill", "Prefix reuse"). `pool.rs` has the
//! tests of the KV pool itself.

use super::{chain, config, drain, engine, engine_held_at, engine_of, wait_idle};
use crate::model::TokenRow;
use crate::model::fake::FakeModel;
use crate::{EngineConfig, Event, FinishReason, ReloadMode, ValidRequest};

fn small_batches(slots: usize, context: usize) -> EngineConfig {
    EngineConfig {
        context,
        max_batch_tokens: slots + 16,
        ..config(slots)
    }
}

/// `n` prompt tokens cycling through 1..=30 (never the fake model's panic token).
fn cycle(n: usize) -> Vec<u32> {
    (0..n).map(|i| (i % 30 + 1) as u32).collect()
}

/// The rows of `slot` in one forward call.
fn rows_of(call: &[TokenRow], slot: usize) -> Vec<TokenRow> {
    call.iter().copied().filter(|r| r.slot == slot).collect()
}

#[test]
fn a_long_prompt_is_prefilled_in_chunks_while_the_others_keep_decoding() {
    let h = engine(1, small_batches(2, 128));
    let running = h.hold(ValidRequest::greedy(vec![1], 8));
    let long = h.e.submit(ValidRequest::greedy(cycle(50), 2)).unwrap();
    h.release.send(()).unwrap();
    assert_eq!(drain(long).0, chain(20, 1, 2));
    assert_eq!(drain(running).0, chain(1, 1, 8));
    let calls = h.calls.lock().unwrap();
    // Budget 18: the running sequence's decode row, then 17 prompt tokens per step.
    let chunks: Vec<usize> = calls[1..=3].iter().map(|c| rows_of(c, 1).len()).collect();
    assert_eq!(chunks, vec![17, 17, 16]);
    for call in &calls[1..=4] {
        assert_eq!(call[0].slot, 0, "the decode row comes first, every step");
        assert!(call.len() <= 18);
    }
    let positions: Vec<usize> = calls[1..=3]
        .iter()
        .flat_map(|c| rows_of(c, 1))
        .map(|r| r.pos)
        .collect();
    assert_eq!(positions, (0..50).collect::<Vec<_>>());
}

#[test]
fn a_prompt_weighs_its_late_rows_only_beside_decoding_streams() {
    // A row at position p costs 1 + p / 8 of the budget of 18 while a stream decodes.
    let lone = engine_of(
        FakeModel::new(1).with_break_even(8),
        0,
        small_batches(2, 128),
    );
    let first = lone.hold(ValidRequest::greedy(cycle(18), 1));
    lone.release.send(()).unwrap();
    assert_eq!(drain(first).0, chain(18, 1, 1));
    // Alone, the whole budget in rows: one step.
    assert_eq!(lone.calls.lock().unwrap()[0].len(), 18);

    let h = engine_of(
        FakeModel::new(1).with_break_even(8),
        0,
        small_batches(2, 128),
    );
    let running = h.hold(ValidRequest::greedy(vec![1], 8));
    let long = h.e.submit(ValidRequest::greedy(cycle(18), 1)).unwrap();
    h.release.send(()).unwrap();
    assert_eq!(drain(long).0, chain(18, 1, 1));
    drain(running);
    let calls = h.calls.lock().unwrap();
    // Beside the decode row, 17 units (136 eighths) a step: positions 0..10 (Σ (8 + p) =
    // 125 eighths; 11 rows would take 143), then 10..16 (123; 7 rows would take 147),
    // then 16..18.
    let chunks: Vec<usize> = calls[1..=3].iter().map(|c| rows_of(c, 1).len()).collect();
    assert_eq!(chunks, vec![10, 6, 2]);
}

#[test]
fn a_prompt_that_begins_like_a_cached_one_computes_only_the_rest() {
    let h = engine(1, config(2));
    h.release.send(()).unwrap();
    let e = &h.e;
    let base = cycle(20);
    assert_eq!(
        drain(e.submit(ValidRequest::greedy(base.clone(), 2)).unwrap()).0,
        chain(20, 1, 2)
    );
    let longer: Vec<u32> = base.iter().copied().chain([5, 6, 7]).collect();
    let n0 = h.calls.lock().unwrap().len();
    assert_eq!(
        drain(e.submit(ValidRequest::greedy(longer.clone(), 2)).unwrap()).0,
        chain(7, 1, 2)
    );
    {
        let calls = h.calls.lock().unwrap();
        let first: Vec<(usize, usize)> = calls[n0].iter().map(|r| (r.slot, r.pos)).collect();
        assert_eq!(
            first,
            (16..23).map(|p| (0, p)).collect::<Vec<_>>(),
            "the cached whole block reused, the rest computed"
        );
    }
    let m = e.metrics();
    assert_eq!((m.prefix_queries.get(), m.prefix_hits.get()), (43, 16));
    wait_idle(e);
    assert_eq!(e.kv_blocks_used(), 0);
    // cache_prompt: false computes everything.
    let mut off = ValidRequest::greedy(longer.clone(), 2);
    off.cache_prompt = false;
    let n1 = h.calls.lock().unwrap().len();
    drain(e.submit(off).unwrap());
    assert_eq!(h.calls.lock().unwrap()[n1].len(), 23);
    // A reload invalidates every cached prefix.
    let model = FakeModel::new(1);
    let calls = model.calls.clone();
    let swapped = e.reload(Box::new(model), "v2".into(), ReloadMode::Keep);
    let _ = swapped.unwrap().blocking_recv();
    drain(e.submit(ValidRequest::greedy(longer, 2)).unwrap());
    assert_eq!(calls.lock().unwrap()[0].len(), 23);
}

#[test]
fn the_choices_of_one_request_share_one_prefill() {
    let h = engine(1, config(4));
    let blocker = h.hold(ValidRequest::greedy(vec![1], 2));
    let prompt = chain(3, 1, 20);
    let choice = |share| {
        let mut r = ValidRequest::greedy(prompt.clone(), 3);
        r.cache_prompt = false;
        r.share = share;
        h.e.submit(r).unwrap()
    };
    let shared: Vec<_> = (0..3).map(|_| choice(Some(9))).collect();
    let alone = choice(None);
    h.release.send(()).unwrap();
    for rx in shared.into_iter().chain([alone]) {
        assert_eq!(drain(rx).0, chain(23, 1, 3));
    }
    drain(blocker);
    let calls = h.calls.lock().unwrap();
    let mut prompt_rows: Vec<usize> = (0..4)
        .map(|slot| {
            let rows = calls.iter().flat_map(|c| rows_of(c, slot));
            rows.filter(|r| r.pos < 20 && r.token == prompt[r.pos])
                .count()
        })
        .filter(|&n| n > 0)
        .collect();
    // One choice computes the prompt, the other two copy all but its last token; the
    // request that shares nothing computes it too.
    prompt_rows.sort();
    assert_eq!(prompt_rows, vec![1, 1, 20, 20]);
}

#[test]
fn prompt_logprobs_come_first_and_max_tokens_zero_only_scores() {
    let h = engine(1, small_batches(2, 64));
    h.release.send(()).unwrap();
    let prompt: Vec<u32> = chain(0, 1, 30).into_iter().chain([5]).collect();
    let mut r = ValidRequest::greedy(prompt.clone(), 0);
    r.prompt_logprobs = Some(2);
    let mut rx = h.e.submit(r.clone()).unwrap();
    let Some(Event::Prompt(scores)) = rx.blocking_recv() else {
        panic!("the prompt's scores first");
    };
    assert_eq!(scores.len(), 31);
    assert_eq!((scores[0].id, scores[0].logprob), (1, None));
    // The fake model predicts t + 1 with logit 10 against 0 for the other 31 tokens.
    let likely = 10.0 - (10f32.exp() + 31.0).ln();
    for s in &scores[1..30] {
        assert!((s.logprob.unwrap() - likely).abs() < 1e-4, "{s:?}");
        assert_eq!(s.top.len(), 2);
        assert_eq!(s.top[0].0, s.id);
    }
    assert!((scores[30].logprob.unwrap() - (likely - 10.0)).abs() < 1e-4);
    let Some(Event::Done(f)) = rx.blocking_recv() else {
        panic!("then the end");
    };
    assert_eq!((f.reason, f.completion_tokens), (FinishReason::Length, 0));
    r.max_tokens = 2;
    let mut rx = h.e.submit(r).unwrap();
    assert!(matches!(rx.blocking_recv(), Some(Event::Prompt(s)) if s.len() == 31));
    assert_eq!(drain(rx).0, chain(5, 1, 2));
}

#[test]
fn clients_leaving_during_a_chunked_or_shared_prefill_free_every_slot() {
    // Held in the second prefill chunk of the leader.
    let h = engine_held_at(1, 1, small_batches(3, 64));
    let prompt = cycle(50);
    let choice = || {
        let mut r = ValidRequest::greedy(prompt.clone(), 2);
        r.share = Some(4);
        r
    };
    let leader = h.hold(choice());
    let followers: Vec<_> = (0..2).map(|_| h.e.submit(choice()).unwrap()).collect();
    let gone = h.e.submit(choice()).unwrap();
    drop(leader);
    drop(gone);
    h.release.send(()).unwrap();
    // The leader's client left mid-prefill: a follower takes the two whole blocks it
    // left in the cache, the other shares that one's prompt.
    for rx in followers {
        assert_eq!(drain(rx).0, chain(20, 1, 2));
    }
    wait_idle(&h.e);
    assert_eq!(h.e.slots_used(), 0);
    assert_eq!(h.e.kv_blocks_used(), 0);
    let m = h.e.metrics();
    assert_eq!(
        m.requests.with_label_values(&["engine", "cancelled"]).get(),
        2
    );
    // 32 positions of the leader's two chunks (whole blocks), then 49 shared.
    assert_eq!(m.prefix_hits.get(), 32 + 49);
}

#[test]
fn requests_sharing_less_than_a_block_are_not_serialised() {
    let h = engine(1, config(4));
    let blocker = h.hold(ValidRequest::greedy(vec![1], 2));
    let system = cycle(14);
    let with_tail = |t: u32| {
        let p: Vec<u32> = system.iter().copied().chain([t, t]).collect();
        h.e.submit(ValidRequest::greedy(p, 2)).unwrap()
    };
    let (a, b) = (with_tail(2), with_tail(3));
    h.release.send(()).unwrap();
    assert_eq!(drain(a).0, chain(2, 1, 2));
    assert_eq!(drain(b).0, chain(3, 1, 2));
    drain(blocker);
    let calls = h.calls.lock().unwrap();
    // Both prompts go into the step after the held one, whole: neither waits for the
    // other, as they have no whole block to share.
    assert_eq!(rows_of(&calls[1], 1).len(), 16);
    assert_eq!(rows_of(&calls[1], 2).len(), 16);
}

#[test]
fn with_prefix_reuse_off_only_siblings_share() {
    let h = engine(
        1,
        EngineConfig {
            prefix_reuse: false,
            ..config(3)
        },
    );
    let prompt = cycle(20);
    // The choices of one request share their prefill. Both are queued while the engine
    // is held inside another prompt's prefill, so that they are admitted in one step
    // (submitted to a running engine, the first could start alone).
    let other = h.hold(ValidRequest::greedy(vec![29, 28, 27], 2));
    let choice = || {
        let mut r = ValidRequest::greedy(prompt.clone(), 2);
        r.share = Some(5);
        h.e.submit(r).unwrap()
    };
    let (a, b) = (choice(), choice());
    h.release.send(()).unwrap();
    drain(other);
    drain(a);
    drain(b);
    assert_eq!(h.e.metrics().prefix_hits.get(), 19);
    // A repeat of the prompt, though, computes it again.
    drain(h.e.submit(ValidRequest::greedy(prompt.clone(), 2)).unwrap());
    let n0 = h.calls.lock().unwrap().len();
    drain(h.e.submit(ValidRequest::greedy(prompt.clone(), 2)).unwrap());
    assert_eq!(
        h.calls.lock().unwrap()[n0].len(),
        20,
        "the repeat computes its prompt"
    );
    assert_eq!(h.e.metrics().prefix_hits.get(), 19);
}
