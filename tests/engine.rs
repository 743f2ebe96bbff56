//! The engine on the real model: continuous batching gives each request the tokens it
//! gets alone, budgets are exact, finish reasons are right, cancellation frees slots.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::engine::testing::set_attention_split_below;
use sluice::engine::{EngineConfig, EngineHandle, Event, FinishReason, SubmitError, ValidRequest};
use sluice::tokenizer::Tokenizer;

fn engine(slots: usize, context: usize) -> (EngineHandle, Arc<Tokenizer>) {
    let loaded = common::load();
    let (model, tok) = (loaded.model, Arc::new(loaded.tokenizer));
    let cfg = EngineConfig {
        slots,
        context,
        max_queued: 1000,
        ..Default::default()
    };
    (EngineHandle::start(model, tok.clone(), cfg), tok)
}

#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    ids: Vec<u32>,
    text: String,
    reason: FinishReason,
    completion_tokens: usize,
}

async fn finish(mut rx: sluice::engine::EventStream) -> Outcome {
    let mut ids = Vec::new();
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token(t) => {
                ids.push(t.id);
                text.push_str(&t.text);
            }
            Event::Done(f) => {
                return Outcome {
                    ids,
                    text,
                    reason: f.reason,
                    completion_tokens: f.completion_tokens,
                };
            }
            Event::Error(e) => panic!("engine error: {e}"),
            Event::Prompt(_) | Event::Beams(_) => panic!("no scores or beams were asked for"),
        }
    }
    panic!("stream ended without Done");
}

/// A prompt of exactly `n` tokens made from real text.
fn prompt_of(tok: &Tokenizer, n: usize, salt: usize) -> Vec<u32> {
    let words = [
        "river", "stone", "the", "light", "of", "morning", "falls", "across", "a", "quiet",
        "valley", "where",
    ];
    common::text_prompt(tok, "", &words, n, salt)
}

fn request(tok: &Tokenizer, i: usize) -> ValidRequest {
    let lens = [5, 600, 17, 64, 130, 9, 300, 33, 250, 12, 450, 70];
    let mut r = ValidRequest::greedy(prompt_of(tok, lens[i % lens.len()], i), 4 + (i * 5) % 29);
    r.stop_ids = tok.end_ids.clone();
    if i % 2 == 1 {
        // Seeded sampling with mixed parameters in the same batch (docs/ARCHITECTURE.md,
        // "Sampling").
        r.params.temperature = 0.7 + (i % 3) as f32 * 0.2;
        r.params.top_p = 0.9;
        r.params.top_k = if i.is_multiple_of(3) { 40 } else { 0 };
        r.params.seed = 1000 + i as u64;
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_requests_match_their_solo_runs() {
    let (eng, tok) = engine(32, 1024);
    let reqs: Vec<ValidRequest> = (0..32).map(|i| request(&tok, i)).collect();
    let mut solo = Vec::new();
    for r in &reqs {
        solo.push(finish(eng.submit(r.clone()).unwrap()).await);
    }
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| eng.submit(r.clone()).unwrap())
        .collect();
    let together = futures::future::join_all(streams.into_iter().map(finish)).await;
    for (i, (a, b)) in solo.iter().zip(&together).enumerate() {
        assert_eq!(a, b, "request {i} differs when batched");
        assert!(b.completion_tokens <= reqs[i].max_tokens);
        if b.reason == FinishReason::Length {
            assert_eq!(b.completion_tokens, reqs[i].max_tokens, "request {i}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_is_exact_beside_larger_budgets() {
    let (eng, tok) = engine(4, 512);
    let prompt = tok.encode("Once upon a time, in a small village,").unwrap();
    // Find the greedy continuation, then make its 8th token a stop token: a budget of 5
    // must end at exactly 5 tokens with `length`, never run on to the stop.
    let free = finish(
        eng.submit(ValidRequest::greedy(prompt.clone(), 12))
            .unwrap(),
    )
    .await;
    let stop_at = free.ids[7];
    assert!(
        !free.ids[..5].contains(&stop_at),
        "pick a prompt whose 8th token is new"
    );
    let mut short = ValidRequest::greedy(prompt.clone(), 5);
    short.stop_ids = vec![stop_at];
    let mates: Vec<_> = (0..3)
        .map(|i| {
            eng.submit(ValidRequest::greedy(prompt_of(&tok, 20 + i, i), 40))
                .unwrap()
        })
        .collect();
    let s = finish(eng.submit(short).unwrap()).await;
    assert_eq!(s.completion_tokens, 5);
    assert_eq!(s.ids, free.ids[..5].to_vec());
    assert_eq!(s.reason, FinishReason::Length);
    for m in futures::future::join_all(mates.into_iter().map(finish)).await {
        assert_eq!(m.completion_tokens, 40);
        assert_eq!(m.reason, FinishReason::Length);
    }
    // And the stop token ends a larger budget with `stop`, the token counted.
    let mut long = ValidRequest::greedy(prompt, 30);
    long.stop_ids = vec![stop_at];
    let l = finish(eng.submit(long).unwrap()).await;
    assert_eq!((l.reason, l.completion_tokens), (FinishReason::Stop, 8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_token_and_stop_string_finish_with_stop() {
    let (eng, tok) = engine(2, 512);
    let chat = tok
        .apply_chat_template(&[sluice::tokenizer::ChatMessage {
            role: "user".into(),
            content: "What is the capital of Germany?".into(),
            ..Default::default()
        }])
        .unwrap();
    let mut r = ValidRequest::greedy(tok.encode(&chat).unwrap(), 100);
    r.stop_ids = tok.end_ids.clone();
    let o = finish(eng.submit(r.clone()).unwrap()).await;
    assert_eq!(o.reason, FinishReason::Stop);
    assert!(tok.end_ids.contains(o.ids.last().unwrap()));
    assert!(o.text.contains("Berlin"), "{}", o.text);
    assert!(!o.text.contains("<|im_end|>"));
    // A stop string inside the answer cuts it there.
    r.stop_strings = vec!["Berlin".into()];
    let s = finish(eng.submit(r).unwrap()).await;
    assert_eq!(s.reason, FinishReason::Stop);
    assert!(
        o.text.starts_with(&s.text) && !s.text.contains("Berlin"),
        "{:?}",
        s.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_immediate_and_dropping_a_stream_frees_the_slot() {
    let (eng, tok) = engine(2, 64);
    let p = tok.encode("Hello there").unwrap();
    let e = eng.submit(ValidRequest::greedy(p.clone(), 63)).unwrap_err();
    assert!(
        matches!(
            e,
            SubmitError::TooLong {
                prompt: 2,
                max_tokens: 63,
                context: 64
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("2") && e.to_string().contains("63") && e.to_string().contains("64")
    );
    // Two long requests fill both slots; dropping them frees the slots for a third.
    let mut a = eng.submit(ValidRequest::greedy(p.clone(), 60)).unwrap();
    let mut b = eng.submit(ValidRequest::greedy(p.clone(), 60)).unwrap();
    // Both are running once each has a token.
    assert!(matches!(a.recv().await, Some(Event::Token(_))));
    assert!(matches!(b.recv().await, Some(Event::Token(_))));
    drop(a);
    drop(b);
    tokio::time::timeout(Duration::from_secs(30), eng.idle())
        .await
        .expect("slots freed");
    let c = finish(eng.submit(ValidRequest::greedy(p, 3)).unwrap()).await;
    assert_eq!(c.completion_tokens, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_request_is_not_held_by_long_batch_mates() {
    let (eng, tok) = engine(4, 512);
    let mut longs: Vec<_> = (0..3)
        .map(|i| {
            eng.submit(ValidRequest::greedy(prompt_of(&tok, 30, i), 200))
                .unwrap()
        })
        .collect();
    // All three are running once each has its first token.
    for rx in longs.iter_mut() {
        assert!(matches!(rx.recv().await, Some(Event::Token(_))));
    }
    let short = finish(
        eng.submit(ValidRequest::greedy(prompt_of(&tok, 10, 9), 4))
            .unwrap(),
    )
    .await;
    assert_eq!(short.completion_tokens, 4);
    // The long ones are still running when the short one is done: it joined their batch
    // between steps and left it without waiting for them.
    let mut seen = [1usize; 3];
    for (rx, n) in longs.iter_mut().zip(seen.iter_mut()) {
        while let Ok(ev) = rx.try_recv() {
            assert!(
                !matches!(ev, Event::Done(_)),
                "a long request finished before the short one"
            );
            *n += 1;
        }
        assert!(*n < 200);
    }
    let rest = futures::future::join_all(longs.into_iter().map(finish)).await;
    for (l, n) in rest.iter().zip(seen) {
        assert_eq!(l.completion_tokens, 200);
        assert_eq!(l.ids.len() + n, 200);
    }
}

#[tokio::test]
async fn the_queued_token_budget_refuses_at_once_and_frees_on_admission() {
    let loaded = common::load();
    let (model, tok) = (loaded.model, Arc::new(loaded.tokenizer));
    let cfg = EngineConfig {
        slots: 1,
        context: 512,
        max_queued: 100,
        max_queued_tokens: 100,
        ..Default::default()
    };
    let eng = EngineHandle::start(model, tok.clone(), cfg);
    let mut long = ValidRequest::greedy(prompt_of(&tok, 10, 0), 300);
    long.stop_ids.clear();
    let running = eng.submit(long).unwrap();
    let t = Instant::now();
    while eng.running() == 0 {
        assert!(t.elapsed() < Duration::from_secs(30), "never admitted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The running request's prompt no longer counts: 60 + 60 > 100 does.
    let first = eng
        .submit(ValidRequest::greedy(prompt_of(&tok, 60, 1), 4))
        .unwrap();
    let refused = eng.submit(ValidRequest::greedy(prompt_of(&tok, 60, 2), 4));
    assert_eq!(refused.unwrap_err(), SubmitError::QueuedTokens(100));
    let fits = eng
        .submit(ValidRequest::greedy(prompt_of(&tok, 40, 3), 4))
        .unwrap();
    drop((running, first, fits));
    // Once the queue drains the budget is whole again.
    tokio::time::timeout(Duration::from_secs(60), eng.idle())
        .await
        .expect("the queue drains");
    assert!(
        eng.submit(ValidRequest::greedy(prompt_of(&tok, 90, 4), 4))
            .is_ok()
    );
}

/// Seeded sampling through the real model, pinned: these ids were produced by the sampler
/// that sorted the whole vocabulary for every draw (`sluice generate --ids --ignore-eos
/// --max-tokens 32 --prompt "Once upon a time, in a quiet valley,"` with each line's
/// flags, before the lazy draw). The same seed must keep giving the same tokens, alone or
/// in a batch.
#[tokio::test]
async fn seeded_samples_are_pinned() {
    let pinned: [(u64, f32, f32, usize, &str); 5] = [
        (
            1,
            0.8,
            0.95,
            0,
            "253 28249 555 3365 33138 30471 100 3658 253 5631 1789 30 909 2312 253 1379 837 384 856 722 357 28 253 11637 282 5806 338 3408 260 11334 282 260",
        ),
        (
            2,
            1.0,
            1.0,
            0,
            "665 4161 253 12978 8525 3365 43967 30 3305 582 3163 28 1041 7456 100 563 253 28249 1379 1217 3441 332 461 28 284 347 253 966 28 260 6913 282",
        ),
        (
            3,
            0.7,
            1.0,
            40,
            "260 3906 1088 337 282 15368 28 253 18961 1102 1088 337 28 436 1137 288 4905 260 5968 259 15126 5569 30 1249 253 27397 2422 1980 260 3906 1088 337",
        ),
        (
            4,
            1.3,
            0.9,
            0,
            "502 4894 253 9077 3985 429 655 1426 391 3259 81 28 3910 805 253 2702 1443 2972 357 288 7282 6734 338 856 11239 260 14241 282 480 11983 30 8286",
        ),
        (
            5,
            0.9,
            1.0,
            0,
            "800 8917 282 701 31210 335 480 17571 30 378 1666 436 4412 351 260 21630 282 37421 284 260 2139 282 26880 6745 288 1075 35343 30 1069 736 1481 24769",
        ),
    ];
    let (eng, tok) = engine(8, 256);
    let prompt = tok.encode("Once upon a time, in a quiet valley,").unwrap();
    let streams: Vec<_> = pinned
        .iter()
        .map(|&(seed, temperature, top_p, top_k, _)| {
            let mut r = ValidRequest::greedy(prompt.clone(), 32);
            r.params.seed = seed;
            r.params.temperature = temperature;
            r.params.top_p = top_p;
            r.params.top_k = top_k;
            eng.submit(r).unwrap()
        })
        .collect();
    for (rx, (seed, .., want)) in streams.into_iter().zip(pinned) {
        let want: Vec<u32> = want.split(' ').map(|t| t.parse().unwrap()).collect();
        assert_eq!(finish(rx).await.ids, want, "seed {seed}");
    }
}

/// Beam search of width 1 chooses what greedy decoding chooses; a wider search returns
/// `n` distinct hypotheses, best first, whose scores are their tokens' log-probabilities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beam_search_of_width_one_is_greedy() {
    let (eng, tok) = engine(8, 512);
    for salt in 0..4 {
        let mut g = ValidRequest::greedy(prompt_of(&tok, 20 + salt * 13, salt), 12);
        g.stop_ids = tok.end_ids.clone();
        let greedy = finish(eng.submit(g.clone()).unwrap()).await;
        let mut b = g.clone();
        b.beam = Some(sluice::engine::BeamSpec {
            width: 1,
            n: 1,
            length_penalty: 1.0,
        });
        let mut rx = eng.submit(b.clone()).unwrap();
        let Some(Event::Beams(out)) = rx.recv().await else {
            panic!("beam results");
        };
        let ids: Vec<u32> = out[0].tokens.iter().map(|t| t.id).collect();
        assert_eq!(ids, greedy.ids, "prompt {salt}");
        b.beam = Some(sluice::engine::BeamSpec {
            width: 4,
            n: 3,
            length_penalty: 1.0,
        });
        let mut rx = eng.submit(b).unwrap();
        let Some(Event::Beams(out)) = rx.recv().await else {
            panic!("beam results");
        };
        assert_eq!(out.len(), 3);
        for w in out.windows(2) {
            assert!(w[0].score >= w[1].score);
            assert_ne!(w[0].tokens, w[1].tokens);
        }
    }
}

/// Rows past 1,024 positions are cut into parts (docs/ARCHITECTURE.md, "Kernels"). Alone,
/// a long sequence's decode rows have their parts shared out between the threads (forced
/// here: by default only where a layer has fewer (row, KV head) items than threads);
/// beside others, with the sharing off, each row runs whole on one thread; a prompt
/// reaching past the cut crosses it in tiles. Neither the tokens nor the bits of their
/// log-probabilities may change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_sequence_gives_the_same_tokens_alone_and_beside_others() {
    let (eng, tok) = engine(4, 1536);
    let mut reqs = vec![
        // Decodes across the cut at 1,024.
        ValidRequest::greedy(prompt_of(&tok, 1000, 7), 48),
        // Its prompt crosses the cut.
        ValidRequest::greedy(prompt_of(&tok, 1100, 8), 16),
        ValidRequest::greedy(prompt_of(&tok, 40, 9), 48),
        ValidRequest::greedy(prompt_of(&tok, 300, 10), 48),
    ];
    for r in &mut reqs {
        r.stop_ids.clear();
        r.logprobs = Some(0);
    }
    // Each token's id and the bits of its log-probability.
    async fn bits(mut rx: sluice::engine::EventStream) -> Vec<(u32, u32)> {
        let mut got = Vec::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Token(t) => got.push((t.id, t.logprob.expect("asked for").to_bits())),
                Event::Done(_) => return got,
                Event::Error(e) => panic!("engine error: {e}"),
                Event::Prompt(_) | Event::Beams(_) => panic!("not asked for"),
            }
        }
        panic!("stream ended without Done");
    }
    // (Other tests in this binary see the setting too: no number depends on it.)
    set_attention_split_below(64);
    let mut solo = Vec::new();
    for r in &reqs {
        solo.push(bits(eng.submit(r.clone()).unwrap()).await);
    }
    set_attention_split_below(1);
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| eng.submit(r.clone()).unwrap())
        .collect();
    let together = futures::future::join_all(streams.into_iter().map(bits)).await;
    set_attention_split_below(0);
    for (i, (a, b)) in solo.iter().zip(&together).enumerate() {
        assert_eq!(a.len(), reqs[i].max_tokens, "request {i} ran to its budget");
        assert_eq!(a, b, "request {i} differs beside the others");
    }
}
