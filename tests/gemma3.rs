//! Gemma 3 270M (Q4_K_M, `scripts/fetch-model gemma3`) against
//! `tests/data/gemma3-270m.json`: llama.cpp's tokenisation (one BOS, SentencePiece with
//! byte fallback), the built-in chat template, greedy runs close to the independent f32
//! reference alone and batched; and served through the HTTP API.

mod common;

use std::path::PathBuf;

use common::golden;
use serde_json::{Value, json};

const GOLDEN: &str = "gemma3-270m.json";

fn gemma() -> PathBuf {
    sluice::config::default_model_path()
        .parent()
        .expect("model dir")
        .join("gemma-3-270m-q4_k_m.gguf")
}

#[test]
fn tokenisation_and_chat_template_match_llama_cpp() {
    let loaded = sluice::load_model(&gemma(), &Default::default())
        .unwrap_or_else(|e| panic!("{e:#}: run scripts/fetch-model gemma3"));
    let tok = loaded.tokenizer;
    golden::tokenisation_matches(&tok, &golden::read(GOLDEN));
    // `<end_of_turn>` ends a turn as well as the file's own end token.
    let eot = tok.id("<end_of_turn>").expect("in the vocabulary");
    assert!(tok.end_ids.contains(&eot) && tok.end_ids.contains(&1));
    // Exactly one BOS: added to a plain text, not doubled when the text has it.
    let bos = tok.bos.expect("bos");
    assert_eq!(tok.encode("Hi").unwrap()[0], bos);
    let twice = tok.encode("<bos>Hi").unwrap();
    assert_eq!(twice.iter().filter(|&&t| t == bos).count(), 1);
}

#[test]
fn greedy_runs_are_close_to_the_reference_alone_and_batched() {
    golden::greedy_close(&gemma(), GOLDEN, false);
}

#[tokio::test]
async fn served_chat_never_shows_the_end_of_turn_and_token_prompts_are_taken_as_given() {
    let base = common::server_with(|a| a.model = vec![gemma().display().to_string()]);
    let post = |path: &str, body: Value| {
        let url = format!("{base}{path}");
        async move { common::post_json(&url, &body).await }
    };
    // The file is the pretrained model, which does not end turns by itself: a logit bias
    // makes <end_of_turn> its first token. It ends the answer and is not shown.
    let r = post(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Say hello."}],
               "max_tokens": 20, "temperature": 0, "logit_bias": {"106": 100}}),
    )
    .await;
    let choice = &r["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{r}");
    assert_eq!(choice["message"]["content"], "", "{r}");
    assert_eq!(r["usage"]["completion_tokens"], 1, "{r}");
    // A token-id prompt is run as given: no BOS added.
    let r = post(
        "/v1/completions",
        json!({"prompt": [818, 5279, 529, 7001, 563], "max_tokens": 1, "temperature": 0}),
    )
    .await;
    assert_eq!(r["usage"]["prompt_tokens"], 5);
}
