//! Request parsing and validation on arbitrary bytes: the JSON extractor's parser and the
//! completions and chat validators (with the default model's tokenizer and chat template)
//! must return Ok or an `ApiError` with a 4xx status, never panic.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice::http::json::parse;
use sluice::api::{ChatRequest, CompletionRequest};
use sluice::tokenizer::Tokenizer;
use sluice::validation::{self, Limits};

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = std::env::var_os("SLUICE_MODEL")
            .map(Into::into)
            .unwrap_or_else(sluice::config::default_model_path);
        let file = sluice::engine::GgufFile::open(&path).expect("scripts/fetch-model first");
        Tokenizer::from_gguf(&file, None).expect("tokenizer")
    })
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits::for_context(2048);
    let tok = tokenizer();
    let check = |e: sluice::error::ApiError| assert!(e.status().is_client_error(), "{e:?}");
    match parse::<CompletionRequest>(data) {
        Ok(r) => {
            if let Err(e) = validation::completion(&r, tok, &limits, "m") {
                check(e.into())
            }
        }
        Err(e) => check(e),
    }
    match parse::<ChatRequest>(data) {
        Ok(r) => {
            if let Err(e) = validation::chat(&r, tok, &limits, "m") {
                check(e.into())
            }
        }
        Err(e) => check(e),
    }
});
