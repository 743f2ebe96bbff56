//! Constrained decoding in the engine loop, on the fake model and a vocabulary of one
//! letter per id (`a` is 0, `b` (1) ends a turn, `f` is 5, `j` is 9): the mask decides what
//! is sampled, matchers are per sequence, and a grammar failure ends its sequence alone.

use std::collections::HashMap;
use std::sync::Arc;

use super::drain;
use crate::model::fake::{FakeModel, VOCAB};
use crate::{EngineConfig, EngineError, EngineHandle, Event};
use crate::{FinishReason, GrammarSpec, Grammars, Tokenizer, ValidRequest};

const END: u32 = 1;

fn tokenizer() -> Arc<Tokenizer> {
    use tokenizers::models::wordlevel::WordLevel;
    let letters = "abcdefghijklmnopqrstuvwxyzABCDEF";
    assert_eq!(letters.len(), VOCAB);
    let vocab: HashMap<String, u32> = letters
        .chars()
        .enumerate()
        .map(|(i, c)| (c.to_string(), i as u32))
        .collect();
    let model = WordLevel::builder()
        .vocab(vocab.into_iter().collect())
        .unk_token("a".into())
        .build()
        .unwrap();
    // One token per letter, so any text tokenises exactly (llguidance tokenises forced
    // text with it).
    let split = tokenizers::pre_tokenizers::split::Split::new(
        tokenizers::pre_tokenizers::split::SplitPattern::Regex(".".into()),
        tokenizers::SplitDelimiterBehavior::Isolated,
        false,
    )
    .unwrap();
    let mut t = tokenizers::Tokenizer::new(model);
    t.with_pre_tokenizer(Some(split));
    Arc::new(Tokenizer::new(t, vec![END]))
}

fn engine(tok: Arc<Tokenizer>) -> EngineHandle {
    let cfg = EngineConfig {
        slots: 4,
        context: 64,
        min_bucket: 16,
        ..EngineConfig::default()
    };
    EngineHandle::start(Box::new(FakeModel::new(1)), tok, cfg)
}

fn constrained(g: &Grammars, regex: &str, prompt: u32) -> ValidRequest {
    let mut r = ValidRequest::greedy(vec![prompt], 10);
    r.stop_ids = vec![END];
    r.constraint = Some(g.compile(&GrammarSpec::Regex(regex.into())).unwrap());
    r
}

#[test]
fn the_mask_decides_and_the_grammar_ends_the_sequence() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    let e = engine(tok);
    // The fake model would continue 3 -> 4, 5, 6...; the grammar wants "fj" then an end.
    let a = e.submit(constrained(&g, "fj", 3)).unwrap();
    let b = e.submit(constrained(&g, "fj", 7)).unwrap();
    let free = e.submit(ValidRequest::greedy(vec![3], 4)).unwrap();
    for rx in [a, b] {
        let (ids, end) = drain(rx);
        assert_eq!(ids, vec![5, 9, END], "{end:?}");
        assert!(matches!(end, Some(Event::Done(f)) if f.reason == FinishReason::Stop));
    }
    let (ids, _) = drain(free);
    assert_eq!(
        ids,
        vec![4, 5, 6, 7],
        "an unconstrained batch mate is untouched"
    );
    assert_eq!(
        e.metrics().constrained.with_label_values(&["regex"]).get(),
        2
    );
    assert!(e.metrics().mask_time.get_sample_count() >= 3);
}

#[test]
fn a_grammar_that_cannot_finish_in_budget_ends_with_length() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    let e = engine(tok);
    let mut r = constrained(&g, "f+j", 3);
    r.max_tokens = 4;
    r.params.logit_bias = vec![(9, -100.0)];
    let (ids, end) = drain(e.submit(r).unwrap());
    assert_eq!(ids, vec![5, 5, 5, 5], "{end:?}");
    assert!(matches!(end, Some(Event::Done(f)) if f.reason == FinishReason::Length));
}

#[test]
fn a_failing_grammar_ends_its_sequence_alone() {
    let tok = tokenizer();
    let g = Grammars::new(tok.clone()).unwrap();
    let e = engine(tok);
    // The only allowed token is forbidden by the bias: the sampler is left with nothing
    // allowed, takes `a` (id 0), and the matcher refuses it.
    let mut bad = constrained(&g, "fj", 3);
    bad.params.logit_bias = vec![(5, -100.0)];
    let bad = e.submit(bad).unwrap();
    let free = e.submit(ValidRequest::greedy(vec![3], 4)).unwrap();
    let (ids, end) = drain(bad);
    assert!(ids.len() <= 1);
    assert!(
        matches!(end, Some(Event::Error(EngineError::Grammar(_)))),
        "{end:?}"
    );
    assert_eq!(drain(free).0, vec![4, 5, 6, 7]);
    assert!(e.is_alive());
}
