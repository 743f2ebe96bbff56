//! Every vocabulary type sluice reads from GGUF tokenises exactly as llama.cpp does: the
//! test vocabularies llama.cpp ships (`scripts/fetch-model vocabs`) with its own expected
//! ids, run as its `test-tokenizer-0` runs them (no BOS, special tokens not parsed).

use std::path::PathBuf;

use sluice::engine::GgufFile;
use sluice::tokenizer::Tokenizer;

/// The vocabularies whose tokenizer type and pre-tokenizer sluice supports.
const VOCABS: &[&str] = &[
    "llama-spm",
    "phi-3",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "gpt-2",
    "starcoder",
    "refact",
    "command-r",
    "mpt",
];

fn dir() -> PathBuf {
    let models = sluice::config::default_model_path()
        .parent()
        .expect("model dir")
        .to_path_buf();
    models.join("llama-cpp-vocabs")
}

fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    let base = dir().join(format!("ggml-vocab-{name}.gguf"));
    let read = |ext: &str| {
        let p = base.with_extension(format!("gguf.{ext}"));
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-model vocabs", p.display()))
    };
    // As llama.cpp reads them: pieces between separators, none after the last one.
    let sep = "\n__ggml_vocab_test__\n";
    let raw = read("inp");
    let raw = raw.strip_suffix(sep).unwrap_or(&raw);
    let inputs: Vec<String> = raw.split(sep).map(str::to_string).collect();
    let outputs: Vec<Vec<u32>> = read("out")
        .lines()
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(inputs.len(), outputs.len(), "{name}: inputs and outputs");
    inputs.into_iter().zip(outputs).collect()
}

fn tokenizer(name: &str) -> Tokenizer {
    let p = dir().join(format!("ggml-vocab-{name}.gguf"));
    let file = GgufFile::open(&p).unwrap_or_else(|e| panic!("{e}; run scripts/fetch-model vocabs"));
    Tokenizer::from_gguf(&file, None, None).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_supported_vocabulary_matches_llama_cpp() {
    let mut failures = Vec::new();
    let mut total = 0;
    for name in VOCABS {
        let tok = tokenizer(name);
        for (text, want) in cases(name) {
            total += 1;
            let got = tok.encode_with(&text, false, false).expect("encodes");
            if got != want {
                failures.push(format!("{name} {text:?}: got {got:?}, llama.cpp {want:?}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn decoding_gives_the_text_back() {
    // Every case whose text the vocabulary can represent round-trips (SentencePiece adds
    // the leading space it prefixes).
    for name in ["llama-spm", "qwen2", "llama-bpe"] {
        let tok = tokenizer(name);
        for (text, ids) in cases(name) {
            let back = tok.decode(&ids).expect("decodes");
            let spm = name == "llama-spm";
            let want = if spm && !ids.is_empty() {
                format!(" {text}")
            } else {
                text.clone()
            };
            assert_eq!(back, want, "{name}: {ids:?}");
        }
    }
}

#[test]
fn unsupported_vocabularies_are_refused_by_name() {
    for (name, says) in [("falcon", "falcon"), ("gemma-4", "gemma4")] {
        let p = dir().join(format!("ggml-vocab-{name}.gguf"));
        let file = GgufFile::open(&p).expect("opens");
        let e = Tokenizer::from_gguf(&file, None, None)
            .err()
            .unwrap_or_else(|| panic!("{name} is refused"))
            .to_string();
        assert!(e.contains(says), "{name}: {e}");
    }
}
