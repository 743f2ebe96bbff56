//! Model files on arbitrary bytes: the GGUF header reader, the tokenizer built from the
//! file's metadata (then run on some text), its chat template (rendered), and the model
//! built from its tensors (then run for one token) must each return Ok or a load error,
//! never panic, abort or allocate the size of a claim. Seeds: `scripts/fuzz-corpus`
//! makes small model files from the real ones.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sluice::engine::{ChatMessage, GgufFile, Tokenizer};

const TEXT: &str = "Hello, world! 12345 <|im_start|>user\n  héllo <s></s>";

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(Path::new("fuzz.gguf"), data.to_vec()) else {
        return;
    };
    if let Ok(tok) = Tokenizer::from_gguf(&file, None, None) {
        if let Ok(ids) = tok.encode(TEXT) {
            let _ = tok.decode(&ids);
        }
        if let Some(t) = &tok.chat_template {
            let _ = t.render(&[ChatMessage::text("user", TEXT)]);
        }
    }
    if let Ok(loaded) = sluice::engine::build(file, None, None) {
        sluice::engine::warm_up(loaded.model.as_ref());
    }
});
