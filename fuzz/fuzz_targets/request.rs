//! Request parsing and validation on arbitrary bytes: the JSON extractor's parser and the
//! completions and chat validators (with the default model's tokenizer and chat template)
//! must return Ok or an `ApiError` with a 4xx status, never panic.

#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use sluice::http::json::parse;
use sluice::api::{ChatRequest, CompletionRequest};
use sluice::engine::Grammars;
use sluice::tokenizer::Tokenizer;
use sluice::validation::{self, Fields, Limits};

/// The default model's tokenizer and the grammar compiler over it.
fn model() -> &'static (Arc<Tokenizer>, Grammars) {
    static MODEL: OnceLock<(Arc<Tokenizer>, Grammars)> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = std::env::var_os("SLUICE_MODEL")
            .map(Into::into)
            .unwrap_or_else(sluice::config::default_model_path);
        let file = sluice::engine::GgufFile::open(&path).expect("scripts/fetch-model first");
        let tok = Arc::new(Tokenizer::from_gguf(&file, None, None).expect("tokenizer"));
        let grammars = Grammars::new(tok.clone()).expect("grammars");
        (tok, grammars)
    })
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits::for_context(2048);
    let (tok, grammars) = model();
    let check = |e: sluice::error::ApiError| assert!(e.status().is_client_error(), "{e:?}");
    match parse::<CompletionRequest>(data) {
        Ok(r) => {
            if let Err(e) = validation::completion(&r, tok, Some(grammars), &limits, "m") {
                check(e.into())
            }
        }
        Err(e) => check(e),
    }
    match parse::<ChatRequest>(data) {
        Ok(r) => {
            let fields = &Fields::OPENAI;
            if let Err(e) = validation::chat(&r, fields, tok, Some(grammars), None, &limits, "m") {
                check(e.into())
            }
        }
        Err(e) => check(e),
    }
});
