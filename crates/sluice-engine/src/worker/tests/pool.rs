//! The KV pool under the engine loop, with the summing fake model (whose tokens depend on
//! every key and value read back through the block tables): preemption and resume,
//! shared blocks and copy-on-write, prefixes computed once, and every block returned
//! however requests end (docs/ARCHITECTURE.md, "The KV pool", "The step plan").

use super::{config, drain, engine_of, wait_idle};
use crate::model::TokenRow;
use crate::model::fake::{FakeModel, VOCAB};
use crate::{EngineConfig, Event, ValidRequest};

/// What the summing model generates after `prompt`: each token is the sum of the
/// sequence so far plus `step`.
pub(super) fn summed(prompt: &[u32], step: u32, n: usize) -> Vec<u32> {
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        let s: u32 = seq.iter().sum();
        seq.push((s + step) % VOCAB as u32);
    }
    seq[prompt.len()..].to_vec()
}

fn prompt(first: u32, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (first + 7 * i) % 29 + 1).collect()
}

fn pool(slots: usize, context: usize, kv_tokens: usize) -> EngineConfig {
    EngineConfig {
        context,
        kv_cache_tokens: kv_tokens,
        ..config(slots)
    }
}

#[test]
fn preempted_sequences_resume_with_the_tokens_they_would_have_given() {
    // Four sequences of 12 + 40 positions (4 blocks each) in a pool of 7 blocks.
    let h = engine_of(FakeModel::summing(3), 0, pool(4, 64, 112));
    let prompts: Vec<Vec<u32>> = (0..4).map(|i| prompt(i, 12)).collect();
    let first = h.hold(ValidRequest::greedy(prompts[0].clone(), 40));
    let rest: Vec<_> = prompts[1..]
        .iter()
        .map(|p| h.e.submit(ValidRequest::greedy(p.clone(), 40)).unwrap())
        .collect();
    h.release.send(()).unwrap();
    for (p, rx) in prompts.iter().zip(std::iter::once(first).chain(rest)) {
        assert_eq!(drain(rx).0, summed(p, 3, 40));
    }
    wait_idle(&h.e);
    assert!(
        h.e.metrics().preemptions.get() > 0,
        "the pool was too small"
    );
    assert_eq!(h.e.kv_blocks_used(), 0);
}

#[test]
fn the_choices_of_n_hold_the_prompt_once_and_copy_only_the_shared_partial_block() {
    let h = engine_of(FakeModel::summing(1), 0, config(4));
    let p = prompt(5, 40);
    let choice = || {
        let mut r = ValidRequest::greedy(p.clone(), 6);
        r.share = Some(7);
        r
    };
    // The first choice's prefill is held; its siblings queue meanwhile.
    let first = h.hold(choice());
    let others: Vec<_> = (0..3).map(|_| h.e.submit(choice()).unwrap()).collect();
    h.release.send(()).unwrap();
    for rx in std::iter::once(first).chain(others) {
        assert_eq!(drain(rx).0, summed(&p, 1, 6));
    }
    wait_idle(&h.e);
    // Three blocks of prompt (16 + 16 + 8) shared by four tables, the partial one copied
    // by the three that wrote into it first: 2 + 4 blocks at most, not 4 x 3.
    assert_eq!(h.e.kv_blocks_peak(), 6);
    assert_eq!(h.e.kv_blocks_used(), 0);
    let calls = h.calls.lock().unwrap();
    let prompt_rows = calls.iter().flatten().filter(|r| r.pos < 39).count();
    assert_eq!(
        prompt_rows, 39,
        "the prompt's shared positions were computed once"
    );
}

#[test]
fn requests_arriving_together_with_one_prefix_compute_it_once() {
    let h = engine_of(FakeModel::summing(2), 0, config(4));
    let blocker = h.hold(ValidRequest::greedy(vec![1], 2));
    let system = prompt(3, 40);
    let with_tail = |t: u32| {
        let p: Vec<u32> = system.iter().copied().chain([t, t, t]).collect();
        (p.clone(), h.e.submit(ValidRequest::greedy(p, 3)).unwrap())
    };
    let asked: Vec<_> = (0..3).map(|i| with_tail(i + 2)).collect();
    h.release.send(()).unwrap();
    for (p, rx) in asked {
        assert_eq!(drain(rx).0, summed(&p, 2, 3));
    }
    drain(blocker);
    wait_idle(&h.e);
    let calls = h.calls.lock().unwrap();
    // Positions 0..32 (two whole blocks) of the system prompt were computed once.
    let rows: Vec<&TokenRow> = calls.iter().flatten().filter(|r| r.pos < 32).collect();
    assert_eq!(
        rows.len(),
        32 + 2,
        "one prompt's 32, and the blocker's two rows"
    );
    let m = h.e.metrics();
    assert_eq!(m.prefix_hits.get(), 2 * 32);
    assert_eq!(h.e.kv_blocks_used(), 0);
}

#[test]
fn every_block_comes_back_however_requests_end() {
    // Queued, mid-prefill (chunked), decoding, parked after a preemption, and a sibling
    // that forked blocks: all cancelled at once.
    let cfg = EngineConfig {
        max_batch_tokens: 20,
        ..pool(6, 64, 160)
    };
    let h = engine_of(FakeModel::summing(1), 3, cfg);
    let long = |first| ValidRequest::greedy(prompt(first, 50), 10);
    let mut streams = vec![h.hold(ValidRequest::greedy(prompt(1, 5), 50))];
    for i in 0..4 {
        streams.push(h.e.submit(long(i)).unwrap());
    }
    let mut sib = ValidRequest::greedy(prompt(9, 20), 30);
    sib.share = Some(3);
    streams.push(h.e.submit(sib.clone()).unwrap());
    streams.push(h.e.submit(sib).unwrap());
    drop(streams);
    h.release.send(()).unwrap();
    wait_idle(&h.e);
    assert_eq!(h.e.kv_blocks_used(), 0);
    assert_eq!(h.e.slots_used(), 0);
    // The pool still serves, from a clean state.
    let p = prompt(4, 30);
    let rx = h.e.submit(ValidRequest::greedy(p.clone(), 20)).unwrap();
    let (ids, end) = drain(rx);
    assert_eq!(ids, summed(&p, 1, 20));
    assert!(matches!(end, Some(Event::Done(_))));
    wait_idle(&h.e);
    assert_eq!(h.e.kv_blocks_used(), 0);
}

#[test]
fn a_long_request_uses_the_room_of_idle_slots() {
    // 4 slots, a pool of 256 positions: one request of 200 positions fits.
    let h = engine_of(FakeModel::summing(1), 0, pool(4, 256, 256));
    h.release.send(()).unwrap();
    let p = prompt(2, 150);
    let (ids, _) = drain(h.e.submit(ValidRequest::greedy(p.clone(), 50)).unwrap());
    assert_eq!(ids, summed(&p, 1, 50));
    wait_idle(&h.e);
    assert_eq!(h.e.kv_blocks_used(), 0);
}
