//! The KV pool on the real model (docs/ARCHITECTURE.md, "The KV pool", "The step plan"): a
//! pool too small for what runs at once preempts and recomputes, and every request still
//! gets exactly the tokens it gets alone; shared prompt blocks change nothing either; and
//! every block comes back.

mod common;

use std::sync::Arc;

use sluice::engine::{EngineConfig, EngineHandle, Event, ValidRequest};
use sluice::tokenizer::Tokenizer;

fn engine(slots: usize, context: usize, kv_cache_tokens: usize) -> (EngineHandle, Arc<Tokenizer>) {
    let loaded = common::load();
    let (model, tok) = (loaded.model, Arc::new(loaded.tokenizer));
    let cfg = EngineConfig {
        slots,
        context,
        kv_cache_tokens,
        max_queued: 1000,
        ..Default::default()
    };
    (EngineHandle::start(model, tok.clone(), cfg), tok)
}

async fn ids(mut rx: sluice::engine::EventStream) -> Vec<u32> {
    let mut ids = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token(t) => ids.push(t.id),
            Event::Done(_) => return ids,
            other => panic!("unexpected event {other:?}"),
        }
    }
    panic!("stream ended without Done");
}

/// A prompt of `n` tokens: a shared opening (so blocks are shared) and then its own text.
fn prompt(tok: &Tokenizer, n: usize, salt: usize) -> Vec<u32> {
    let opening = "Notes from the river survey, kept by the station crew: ";
    let words = [
        "stone", "light", "morning", "valley", "bridge", "water", "field", "north",
    ];
    common::text_prompt(tok, opening, &words, n, salt)
}

fn request(tok: &Tokenizer, i: usize) -> ValidRequest {
    let mut r = ValidRequest::greedy(prompt(tok, 90 + 13 * i, i), 110 + 7 * i);
    if i % 2 == 1 {
        r.params.temperature = 0.8;
        r.params.top_p = 0.95;
        r.params.seed = 77 + i as u64;
        r.seeded = true;
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_too_small_for_all_preempts_and_each_answer_equals_its_answer_alone() {
    // 8 requests of ~200-300 positions each, ~2,000 in all, in a pool of 1,024.
    let (eng, tok) = engine(8, 512, 1024);
    let reqs: Vec<ValidRequest> = (0..8).map(|i| request(&tok, i)).collect();
    let mut alone = Vec::new();
    for r in &reqs {
        alone.push(ids(eng.submit(r.clone()).unwrap()).await);
    }
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| eng.submit(r.clone()).unwrap())
        .collect();
    let together = futures::future::join_all(streams.into_iter().map(ids)).await;
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.len(), reqs[i].max_tokens, "request {i} ran to its budget");
        assert_eq!(a, b, "request {i} differs when it shared the pool");
    }
    eng.idle().await;
    let m = eng.metrics();
    assert!(m.preemptions.get() > 0, "the pool was meant to run out");
    assert!(m.prefix_hits.get() > 0, "the shared opening was reused");
    assert_eq!(eng.kv_blocks_used(), 0);
}

#[test]
fn a_beam_search_whose_beams_cannot_fit_the_pool_is_a_400_naming_the_numbers() {
    use sluice::validation::{self, Limits, ValidationError};
    let tok = common::load().tokenizer;
    let mut limits = Limits::for_context(1024);
    limits.slots = 8;
    limits.kv_tokens = 2048;
    let req = |max_tokens: usize| -> sluice::api::CompletionRequest {
        serde_json::from_value(serde_json::json!({
            "prompt": "The river", "use_beam_search": true, "best_of": 4, "n": 1,
            "max_tokens": max_tokens, "logprobs": 0
        }))
        .unwrap()
    };
    // 4 beams x 500 + the prompt fit in 2,048 positions; 4 x 600 do not, although each
    // beam alone fits the context of 1,024.
    assert!(validation::completion(&req(500), &tok, None, &limits, "m").is_ok());
    match validation::completion(&req(600), &tok, None, &limits, "m") {
        Err(ValidationError::ContextLength { param, message }) => {
            assert_eq!(param, "max_tokens");
            assert!(
                message.contains("4 beams x 600") && message.contains("2048"),
                "{message}"
            );
        }
        other => panic!(
            "expected a context-length refusal, got {:?}",
            other.map(|_| ())
        ),
    }
}
