//! Speculative decoding on the real model (docs/ARCHITECTURE.md, "Speculative decoding"):
//! drafts taken from the context are verified in the step's forward pass and never
//! change a token. Greedy answers, seeded sampled answers (same seed, same tokens: so the
//! same distribution too, token for token rather than by a statistical test), their
//! log-probabilities, stop strings, end tokens and `max_tokens` inside accepted drafts,
//! and batch invariance with drafts in the batch; every block comes back.

mod common;

use std::sync::Arc;

use sluice::engine::{EngineConfig, EngineHandle, Event, FinishReason, ValidRequest};
use sluice::tokenizer::Tokenizer;

fn engine(spec_tokens: usize) -> (EngineHandle, Arc<Tokenizer>) {
    let loaded = common::load();
    let (model, tok) = (loaded.model, Arc::new(loaded.tokenizer));
    let cfg = EngineConfig {
        slots: 8,
        context: 2048,
        spec_tokens,
        max_queued: 1000,
        ..Default::default()
    };
    (EngineHandle::start(model, tok.clone(), cfg), tok)
}

#[derive(Debug, PartialEq)]
struct Answer {
    ids: Vec<u32>,
    logprobs: Vec<Option<f32>>,
    text: String,
    reason: FinishReason,
}

async fn answer(mut rx: sluice::engine::EventStream) -> Answer {
    let (mut ids, mut logprobs, mut text) = (Vec::new(), Vec::new(), String::new());
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Token(t) => {
                ids.push(t.id);
                logprobs.push(t.logprob);
                text.push_str(&t.text);
            }
            Event::Done(f) => {
                return Answer {
                    ids,
                    logprobs,
                    text,
                    reason: f.reason,
                };
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    panic!("stream ended without Done");
}

const PASSAGES: [&str; 3] = [
    "The old mill stood at the bend of the river, where the water slowed and widened \
     before the weir. Every spring the miller cleared the channel of branches and silt, \
     and every autumn he mended the wheel with oak cut from the hill behind the house.",
    "fn main() {\n    let mut total = 0;\n    for i in 0..10 {\n        total += i * i;\n    \
     }\n    println!(\"sum of squares: {}\", total);\n}",
    "Invoice 2231, due on the first of March: twelve boxes of nails at four dollars, \
     three rolls of wire at nine dollars, and one ladder at forty dollars, delivered to \
     the north gate of the station.",
];

/// A chat asking the model to copy (or edit) a passage: its answer repeats the prompt.
fn copy(tok: &Tokenizer, instruction: &str, passage: &str) -> Vec<u32> {
    tok.encode(&format!(
        "<|im_start|>user\n{instruction}\n\n{passage}<|im_end|>\n<|im_start|>assistant\n"
    ))
    .unwrap()
}

fn ask(tok: &Tokenizer, question: &str) -> Vec<u32> {
    tok.encode(&format!(
        "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    ))
    .unwrap()
}

/// Greedy requests of every kind: copies ending at the end token, a stop string, a
/// `max_tokens` that cuts an accepted run, an edit, open questions; with logprobs; and a
/// copy held to a grammar (which does not draft, and must not change either).
fn greedy_requests(tok: &Arc<Tokenizer>) -> Vec<ValidRequest> {
    let end = tok.id("<|im_end|>").expect("the ChatML end token");
    let mut out = Vec::new();
    for p in PASSAGES {
        let mut r = ValidRequest::greedy(copy(tok, "Repeat this text exactly:", p), 160);
        r.stop_ids = vec![end];
        r.logprobs = Some(2);
        out.push(r);
    }
    let mut r = ValidRequest::greedy(copy(tok, "Repeat this text exactly:", PASSAGES[0]), 160);
    r.stop_strings = vec!["oak".into()];
    out.push(r);
    out.push(ValidRequest::greedy(
        copy(tok, "Repeat this text exactly:", PASSAGES[2]),
        37,
    ));
    let mut r = ValidRequest::greedy(
        copy(
            tok,
            "Rewrite this code with the variable renamed to sum:",
            PASSAGES[1],
        ),
        120,
    );
    r.stop_ids = vec![end];
    out.push(r);
    for q in ["What makes a good bread?", "Name three rivers in Europe."] {
        let mut r = ValidRequest::greedy(ask(tok, q), 48);
        r.logprobs = Some(1);
        out.push(r);
    }
    let grammars = sluice::engine::Grammars::new(tok.clone()).unwrap();
    let spec = sluice::engine::GrammarSpec::Regex("[A-Za-z ,.]{1,200}".into());
    let mut r = ValidRequest::greedy(copy(tok, "Repeat this text exactly:", PASSAGES[0]), 60);
    r.constraint = Some(grammars.compile(&spec).unwrap());
    r.stop_ids = vec![end];
    out.push(r);
    out
}

fn sampled(tok: &Tokenizer, i: usize) -> ValidRequest {
    let mut r = ValidRequest::greedy(copy(tok, "Repeat this text exactly:", PASSAGES[i % 3]), 64);
    r.params.temperature = if i.is_multiple_of(2) { 0.8 } else { 1.0 };
    r.params.top_p = 0.95;
    r.params.min_p = if i.is_multiple_of(3) { 0.05 } else { 0.0 };
    r.params.repetition_penalty = if i % 4 == 1 { 1.1 } else { 1.0 };
    r.params.seed = 1000 + i as u64;
    r.seeded = true;
    r.logprobs = Some(0);
    r
}

async fn each_alone(eng: &EngineHandle, reqs: &[ValidRequest]) -> Vec<Answer> {
    let mut out = Vec::new();
    for r in reqs {
        out.push(answer(eng.submit(r.clone()).unwrap()).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_with_speculation_are_the_answers_without_it() {
    let (off, tok) = engine(0);
    let greedy = greedy_requests(&tok);
    let seeded: Vec<ValidRequest> = (0..12).map(|i| sampled(&tok, i)).collect();
    let want_greedy = each_alone(&off, &greedy).await;
    let want_seeded = each_alone(&off, &seeded).await;
    drop(off);
    let (on, _) = engine(8);
    let got_greedy = each_alone(&on, &greedy).await;
    for (i, (a, b)) in want_greedy.iter().zip(&got_greedy).enumerate() {
        assert_eq!(a, b, "greedy request {i}");
    }
    let copied = &got_greedy[0];
    assert_eq!(copied.reason, FinishReason::Stop, "{copied:?}");
    assert!(
        copied.text.contains("the weir"),
        "the model copies: {copied:?}"
    );
    assert_eq!(got_greedy[3].reason, FinishReason::Stop);
    assert_eq!(got_greedy[4].ids.len(), 37);
    // The counters are updated after a request's last token is sent: read them idle.
    on.idle().await;
    let m = on.metrics();
    let (drafted, accepted) = (m.spec_drafted.get(), m.spec_accepted.get());
    assert!(
        accepted > 100,
        "copying is drafted and accepted: {accepted} of {drafted}"
    );
    let got_seeded = each_alone(&on, &seeded).await;
    for (i, (a, b)) in want_seeded.iter().zip(&got_seeded).enumerate() {
        assert_eq!(a, b, "seeded request {i}");
    }
    on.idle().await;
    assert!(
        m.spec_accepted.get() > accepted,
        "sampled copies accept drafts too"
    );
    assert_eq!(on.kv_blocks_used(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_speculation_a_request_gives_the_same_tokens_alone_or_in_any_batch() {
    let (eng, tok) = engine(8);
    let mut reqs = greedy_requests(&tok);
    reqs.truncate(5);
    reqs.extend((0..3).map(|i| sampled(&tok, i)));
    let alone = each_alone(&eng, &reqs).await;
    // All at once (8 slots: drafts beside plain decode rows and prompt chunks), then
    // again in reverse order (other slots, other neighbours).
    for order in [false, true] {
        let mut idx: Vec<usize> = (0..reqs.len()).collect();
        if order {
            idx.reverse();
        }
        let streams: Vec<_> = idx
            .iter()
            .map(|&i| eng.submit(reqs[i].clone()).unwrap())
            .collect();
        let together = futures::future::join_all(streams.into_iter().map(answer)).await;
        for (&i, got) in idx.iter().zip(&together) {
            assert_eq!(&alone[i], got, "request {i} (reversed: {order})");
        }
    }
    eng.idle().await;
    assert_eq!(eng.kv_blocks_used(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drafts_from_a_draft_model_change_no_token_either() {
    let (off, tok) = engine(0);
    let mut reqs = greedy_requests(&tok);
    let greedy = reqs.len();
    reqs.extend((0..4).map(|i| sampled(&tok, i)));
    let want = each_alone(&off, &reqs).await;
    drop(off);
    // The model drafting for itself: the same file loaded twice, so every greedy draft
    // is the greedy choice (a row's numbers do not depend on its batch).
    let (main, draft) = (common::load(), common::load());
    let cfg = EngineConfig {
        slots: 8,
        context: 2048,
        spec_tokens: 8,
        max_queued: 1000,
        ..Default::default()
    };
    let metrics = Arc::new(sluice::engine::Metrics::new(8, "draft-test"));
    let eng = EngineHandle::start_with_draft(
        main.model,
        Some(draft.model),
        Arc::new(main.tokenizer),
        cfg,
        metrics,
    );
    let got = each_alone(&eng, &reqs[..greedy]).await;
    eng.idle().await;
    let m = eng.metrics();
    let (drafted, accepted) = (m.spec_drafted.get(), m.spec_accepted.get());
    // Only drafts past an end token or a stop string go unused.
    assert!(
        accepted > 200 && accepted * 10 >= drafted * 9,
        "{accepted} of {drafted}"
    );
    let mut got = got;
    got.extend(each_alone(&eng, &reqs[greedy..]).await);
    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
        assert_eq!(a, b, "request {i}");
    }
    eng.idle().await;
    assert_eq!(eng.kv_blocks_used(), 0);
}

/// The statistical check as well: 256 seeds sampling 12 tokens of a copy at temperature
/// 1, all at once, with and without speculation; the two-sample chi-square of the
/// (position, token) counts stays below the 0.999 quantile of its distribution. (It is 0
/// here: each seed gives the same tokens either way.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_tokens_follow_the_same_distribution_with_and_without_speculation() {
    use std::collections::HashMap;
    async fn counts(eng: &EngineHandle, reqs: &[ValidRequest]) -> HashMap<(usize, u32), f64> {
        let streams: Vec<_> = reqs
            .iter()
            .map(|r| eng.submit(r.clone()).unwrap())
            .collect();
        let mut out = HashMap::new();
        for a in futures::future::join_all(streams.into_iter().map(answer)).await {
            for (i, t) in a.ids.iter().enumerate() {
                *out.entry((i, *t)).or_insert(0.0) += 1.0;
            }
        }
        out
    }
    let (off, tok) = engine(0);
    let prompt = copy(&tok, "Repeat this text exactly:", PASSAGES[2]);
    let reqs: Vec<ValidRequest> = (0..256u64)
        .map(|seed| {
            let mut r = ValidRequest::greedy(prompt.clone(), 12);
            r.params.temperature = 1.0;
            r.params.seed = seed;
            r.seeded = true;
            r
        })
        .collect();
    let without = counts(&off, &reqs).await;
    drop(off);
    let (on, _) = engine(8);
    let with = counts(&on, &reqs).await;
    on.idle().await;
    assert!(on.metrics().spec_accepted.get() > 0, "drafts were accepted");
    let bins: std::collections::HashSet<_> = without.keys().chain(with.keys()).collect();
    let chi2: f64 = bins
        .iter()
        .map(|k| {
            let (a, b) = (
                without.get(k).copied().unwrap_or(0.0),
                with.get(k).copied().unwrap_or(0.0),
            );
            (a - b).powi(2) / (a + b)
        })
        .sum();
    let df = bins.len() as f64 - 1.0;
    // The 0.999 quantile of chi-square(df), by the normal approximation.
    let critical = df + 3.09 * (2.0 * df).sqrt();
    assert!(
        chi2 < critical,
        "chi-square {chi2:.1} over {critical:.1} ({df} df)"
    );
    assert_eq!(on.kv_blocks_used(), 0);
}
