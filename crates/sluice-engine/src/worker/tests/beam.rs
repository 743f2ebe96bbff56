//! Beam search on the fake model: slots per beam, copies, ends, and leaving mid-search.

use super::{chain, config, drain, engine, engine_held_at, wait_idle};
use crate::model::TokenRow;
use crate::{BeamOut, BeamSpec, Event, EventStream, FinishReason, ValidRequest};

fn beam(prompt: Vec<u32>, max_tokens: usize, width: usize, n: usize) -> ValidRequest {
    let mut r = ValidRequest::greedy(prompt, max_tokens);
    r.beam = Some(BeamSpec {
        width,
        n,
        length_penalty: 1.0,
    });
    r
}

fn results(mut rx: EventStream) -> (Vec<BeamOut>, crate::Finish) {
    let Some(Event::Beams(out)) = rx.blocking_recv() else {
        panic!("the hypotheses first");
    };
    let Some(Event::Done(f)) = rx.blocking_recv() else {
        panic!("then the end");
    };
    (out, f)
}

fn ids(b: &BeamOut) -> Vec<u32> {
    b.tokens.iter().map(|t| t.id).collect()
}

#[test]
fn width_one_is_greedy_and_wider_searches_use_a_slot_per_beam() {
    let h = engine(1, config(4));
    h.release.send(()).unwrap();
    let (out, f) = results(h.e.submit(beam(vec![3, 4], 4, 1, 1)).unwrap());
    assert_eq!(
        ids(&out[0]),
        drain(h.e.submit(ValidRequest::greedy(vec![3, 4], 4)).unwrap()).0
    );
    assert_eq!(
        (out.len(), f.reason, f.completion_tokens),
        (1, FinishReason::Length, 4)
    );
    let n0 = h.calls.lock().unwrap().len();
    let (out, _) = results(h.e.submit(beam(vec![3, 4], 3, 3, 2)).unwrap());
    assert_eq!(out.len(), 2);
    assert_eq!(
        ids(&out[0]),
        chain(4, 1, 3),
        "the most likely beam is the greedy one"
    );
    assert_ne!(ids(&out[0]), ids(&out[1]));
    assert!(out[0].score >= out[1].score);
    let calls = h.calls.lock().unwrap();
    let decode: Vec<&Vec<TokenRow>> = calls[n0 + 1..].iter().collect();
    assert!(!decode.is_empty());
    for call in decode {
        let mut slots: Vec<usize> = call.iter().map(|r| r.slot).collect();
        slots.sort();
        slots.dedup();
        assert_eq!(
            (call.len(), slots.len()),
            (3, 3),
            "a row per beam, each in its slot"
        );
    }
}

#[test]
fn an_end_token_finishes_a_hypothesis_and_leaving_frees_every_slot() {
    let h = engine(1, config(4));
    h.release.send(()).unwrap();
    // The greedy path 5 -> 6 -> 7: 7 ends it.
    let mut r = beam(vec![5], 10, 2, 1);
    r.stop_ids = vec![7];
    let (out, _) = results(h.e.submit(r).unwrap());
    assert_eq!(ids(&out[0]), vec![6, 7]);
    assert_eq!(out[0].reason, FinishReason::Stop);
    assert!(out[0].tokens[1].is_end);
}

#[test]
fn a_client_leaving_mid_search_frees_every_slot() {
    // Held in the search's second step, three beams running.
    let h = engine_held_at(2, 1, config(4));
    let gone = h.hold(beam(vec![1], 40, 3, 1));
    assert_eq!(h.e.slots_used(), 3);
    drop(gone);
    h.release.send(()).unwrap();
    wait_idle(&h.e);
    assert_eq!(h.e.slots_used(), 0);
    assert_eq!(h.e.kv_blocks_used(), 0);
    assert_eq!(h.calls.lock().unwrap().len(), 3);
}
