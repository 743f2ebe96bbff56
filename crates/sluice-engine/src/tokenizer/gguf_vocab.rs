//! Reads the vocabulary from `tokenizer.ggml.*` metadata: a SentencePiece vocabulary
//! (`llama`, run by `spm.rs`) or a byte-level BPE (`gpt2`, run by the `tokenizers` crate
//! with the pre-tokenizer that `tokenizer.ggml.pre` names), plus the special tokens and
//! the BOS/space-prefix settings llama.cpp's `llama-vocab.cpp` derives from them.

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::Model;
use super::special::Special;
use super::spm::Spm;
use crate::error::{ModelError, TokenizerError};
use crate::gguf::GgufFile;

const LLAMA3_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's Tekken (Nemo, Pixtral, Small 3): the regex of its `tokenizer.json`, which
/// splits words where lower case turns to upper and takes digits one by one. (llama.cpp
/// rewrites it for its own regex engine, treating every letter outside a-z as upper case;
/// the `tokenizers` crate runs the original, as transformers does.)
const TEKKEN_REGEX: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types (llama.cpp `llama_token_type`).
pub(super) mod kind {
    pub const NORMAL: u32 = 1;
    pub const UNKNOWN: u32 = 2;
    pub const CONTROL: u32 = 3;
    pub const USER_DEFINED: u32 = 4;
    pub const UNUSED: u32 = 5;
    pub const BYTE: u32 = 6;
}

/// Everything read from the file's vocabulary.
pub(super) struct Vocab {
    pub model: Model,
    pub tokens: Vec<String>,
    pub types: Vec<u32>,
    pub specials: Vec<Special>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    pub add_space_prefix: bool,
}

fn strings(file: &GgufFile, key: &str) -> Result<Vec<String>, ModelError> {
    let bad = || ModelError::Metadata(key.to_string());
    file.get(key)?
        .to_vec()
        .map_err(|_| bad())?
        .iter()
        .map(|v| v.to_string().cloned().map_err(|_| bad()))
        .collect()
}

fn numbers(file: &GgufFile, key: &str) -> Vec<f64> {
    match file.get(key) {
        Ok(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::I32(x) => *x as f64,
                Value::U32(x) => *x as f64,
                Value::F32(x) => *x as f64,
                Value::F64(x) => *x,
                _ => 0.0,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn split(regex: &str) -> Result<PreTokenizerWrapper, TokenizerError> {
    Split::new(
        SplitPattern::Regex(regex.into()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map(Into::into)
    .map_err(|e| TokenizerError::Vocab(e.to_string()))
}

/// The pre-tokenizer for a `tokenizer.ggml.pre` name, and whether words already in the
/// vocabulary skip the merges (llama.cpp's `ignore_merges`).
fn pre_tokenizer(pre: &str) -> Result<(PreTokenizerWrapper, bool), TokenizerError> {
    let byte_level_regex = ByteLevel::new(false, true, true);
    let byte_level_only = ByteLevel::new(false, true, false);
    Ok(match pre {
        // GPT-2's regex after splitting every digit on its own.
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => (
            Sequence::new(vec![Digits::new(true).into(), byte_level_regex.into()]).into(),
            false,
        ),
        "tekken" => (
            Sequence::new(vec![split(TEKKEN_REGEX)?, byte_level_only.into()]).into(),
            true,
        ),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" => (
            Sequence::new(vec![split(LLAMA3_REGEX)?, byte_level_only.into()]).into(),
            true,
        ),
        "smaug-bpe" => (
            Sequence::new(vec![split(LLAMA3_REGEX)?, byte_level_only.into()]).into(),
            false,
        ),
        "qwen2" | "deepseek-r1-qwen" => (
            Sequence::new(vec![split(QWEN2_REGEX)?, byte_level_only.into()]).into(),
            false,
        ),
        "qwen35" => (
            Sequence::new(vec![split(QWEN35_REGEX)?, byte_level_only.into()]).into(),
            false,
        ),
        "default" | "gpt2" | "gpt-2" | "phi-2" | "olmo" | "mpt" | "jais" => {
            (byte_level_regex.into(), false)
        }
        other => {
            return Err(TokenizerError::Vocab(format!(
                "unsupported pre-tokenizer `{other}` (tokenizer.ggml.pre); pass --tokenizer \
                 with the model's tokenizer.json"
            )));
        }
    })
}

fn bpe(file: &GgufFile, tokens: &[String], types: &[u32]) -> Result<Model, ModelError> {
    let merges = strings(file, "tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| TokenizerError::Vocab(format!("invalid merge `{m}`")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let pre = file.get_str("tokenizer.ggml.pre").unwrap_or("default");
    let (pre, ignore_merges) = pre_tokenizer(pre)?;
    let model = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| TokenizerError::Vocab(e.to_string()))?;
    let mut tok = tokenizers::Tokenizer::new(model);
    tok.with_pre_tokenizer(Some(pre));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    // Special tokens are split off by `special.rs` before the BPE runs; they are added
    // here only so that decoding writes their text as it is.
    let specials: Vec<AddedToken> = types
        .iter()
        .zip(tokens)
        .filter(|(t, _)| matches!(**t, kind::CONTROL | kind::USER_DEFINED | kind::UNKNOWN))
        .map(|(_, s)| AddedToken::from(s.clone(), true))
        .collect();
    tok.add_special_tokens(&specials);
    tok.set_encode_special_tokens(true);
    Ok(Model::Bpe(tok))
}

/// Reads the vocabulary of `file`.
pub(super) fn read(file: &GgufFile) -> Result<Vocab, ModelError> {
    let kind_name = file.get_str("tokenizer.ggml.model")?;
    let tokens = strings(file, "tokenizer.ggml.tokens")?;
    let mut types: Vec<u32> = numbers(file, "tokenizer.ggml.token_type")
        .into_iter()
        .map(|t| t as u32)
        .collect();
    types.resize(tokens.len(), kind::NORMAL);
    let pre = file.get_str("tokenizer.ggml.pre").unwrap_or("default");
    let (model, add_bos_default, space_default) = match kind_name {
        "llama" => {
            let mut scores: Vec<f32> = numbers(file, "tokenizer.ggml.scores")
                .into_iter()
                .map(|s| s as f32)
                .collect();
            scores.resize(tokens.len(), 0.0);
            (
                Model::Spm(Box::new(Spm::new(tokens.clone(), scores))),
                true,
                true,
            )
        }
        "gpt2" => {
            let bos_default = matches!(pre, "llama3" | "llama-v3" | "llama-bpe" | "falcon3")
                || matches!(pre, "pixtral" | "tekken");
            (bpe(file, &tokens, &types)?, bos_default, false)
        }
        other => {
            return Err(TokenizerError::Vocab(format!(
                "tokenizer model `{other}` (tokenizer.ggml.model) is not supported from GGUF \
                 metadata (supported: llama, gpt2); pass --tokenizer with the model's \
                 tokenizer.json"
            ))
            .into());
        }
    };
    let id = |key: &str| {
        file.get_u64(key)
            .ok()
            .map(|v| v as u32)
            .filter(|&v| (v as usize) < tokens.len())
    };
    let phi3 = file
        .get_str("general.name")
        .map(|n| n.to_lowercase())
        .is_ok_and(|n| n.contains("phi-3") || n.contains("phi3"));
    let mut specials: Vec<Special> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(**t, kind::CONTROL | kind::USER_DEFINED | kind::UNKNOWN))
        .map(|(i, t)| Special {
            id: i as u32,
            text: tokens[i].clone(),
            control: *t != kind::USER_DEFINED,
            lstrip: false,
            // llama.cpp strips the whitespace after Phi-3's special tokens but these.
            rstrip: phi3 && !matches!(tokens[i].as_str(), "<unk>" | "<s>" | "<|endoftext|>"),
        })
        .collect();
    if phi3
        && let Some(i) = tokens.iter().position(|t| t == "</s>")
        && let Some(s) = specials.iter_mut().find(|s| s.id == i as u32)
    {
        s.rstrip = true;
    }
    // Longest first; equal lengths by id, so the order does not depend on the sort.
    specials.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
    Ok(Vocab {
        model,
        bos: id("tokenizer.ggml.bos_token_id"),
        eos: id("tokenizer.ggml.eos_token_id"),
        add_bos: file
            .get_bool("tokenizer.ggml.add_bos_token")
            .unwrap_or(add_bos_default),
        add_space_prefix: file
            .get_bool("tokenizer.ggml.add_space_prefix")
            .unwrap_or(space_default),
        tokens,
        types,
        specials,
    })
}

/// The special ids and settings only, for a file whose vocabulary a `tokenizer.json`
/// replaces.
pub(super) fn ids_only(file: &GgufFile) -> Vocab {
    let id = |key: &str| file.get_u64(key).ok().map(|v| v as u32);
    Vocab {
        model: Model::Spm(Box::new(Spm::new(Vec::new(), Vec::new()))),
        tokens: strings(file, "tokenizer.ggml.tokens").unwrap_or_default(),
        types: Vec::new(),
        specials: Vec::new(),
        bos: id("tokenizer.ggml.bos_token_id"),
        eos: id("tokenizer.ggml.eos_token_id"),
        add_bos: file
            .get_bool("tokenizer.ggml.add_bos_token")
            .unwrap_or(false),
        add_space_prefix: false,
    }
}

/// Ids that end a generation: the declared EOS and EOT plus the usual end-of-turn tokens
/// that exist in the vocabulary (as llama.cpp's end-of-generation set).
pub(super) fn end_ids(file: &GgufFile, id_of: impl Fn(&str) -> Option<u32>) -> Vec<u32> {
    let mut ids = Vec::new();
    for key in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Ok(id) = file.get_u64(key)
            && !ids.contains(&(id as u32))
        {
            ids.push(id as u32);
        }
    }
    for name in [
        "<|endoftext|>",
        "<|im_end|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|end_of_text|>",
        "<end_of_turn>",
        "<|end|>",
        "</s>",
    ] {
        if let Some(id) = id_of(name)
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    use super::pre_tokenizer;

    fn pieces(pre: &str, text: &str) -> Vec<String> {
        let (p, _) = pre_tokenizer(pre).unwrap();
        let mut s = PreTokenizedString::from(text);
        p.pre_tokenize(&mut s).unwrap();
        s.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(piece, _, _)| piece.to_string())
            .collect()
    }

    /// Tekken splits where lower case turns to upper and takes digits one by one, where
    /// Llama 3's regex keeps `HelloWorld` and `123` whole (pieces are byte-level: `Ġ` is a
    /// space, `Ċ` a newline).
    #[test]
    fn tekken_splits_by_its_own_regex() {
        let text = "HelloWorld 123 don't HTTPServer\n\nÉcole";
        assert_eq!(
            pieces("tekken", text),
            [
                "Hello",
                "World",
                "Ġ",
                "1",
                "2",
                "3",
                "Ġdon",
                "'t",
                "ĠHTTPServer",
                "ĊĊ",
                "Ãīcole"
            ]
        );
        assert_eq!(
            pieces("llama3", text),
            [
                "HelloWorld",
                "Ġ",
                "123",
                "Ġdon",
                "'t",
                "ĠHTTPServer",
                "ĊĊ",
                "Ãīcole"
            ]
        );
    }
}
