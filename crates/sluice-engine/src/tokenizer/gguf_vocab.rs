//! Builds a `tokenizers` byte-level BPE from `tokenizer.ggml.*` metadata, with the
//! pre-tokenizer that `tokenizer.ggml.pre` names (as llama.cpp's `llama-vocab.cpp` does).

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::TokenizerError;
use crate::gguf::{GgufFile, ModelError};

const LLAMA3_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GGUF token types (llama.cpp `llama_token_type`).
const TOKEN_CONTROL: u32 = 3;
const TOKEN_USER_DEFINED: u32 = 4;

fn strings(file: &GgufFile, key: &str) -> Result<Vec<String>, ModelError> {
    let bad = || ModelError::Metadata(key.to_string());
    file.get(key)?
        .to_vec()
        .map_err(|_| bad())?
        .iter()
        .map(|v| v.to_string().cloned().map_err(|_| bad()))
        .collect()
}

fn token_types(file: &GgufFile) -> Vec<u32> {
    match file.get("tokenizer.ggml.token_type") {
        Ok(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::I32(x) => *x as u32,
                Value::U32(x) => *x,
                _ => 1,
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

/// The pre-tokenizer for a `tokenizer.ggml.pre` name.
fn pre_tokenizer(pre: &str) -> Result<PreTokenizerWrapper, TokenizerError> {
    let byte_level_regex = ByteLevel::new(false, true, true);
    let byte_level_only = ByteLevel::new(false, true, false);
    Ok(match pre {
        // GPT-2's regex after splitting every digit on its own.
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => {
            Sequence::new(vec![Digits::new(true).into(), byte_level_regex.into()]).into()
        }
        "llama3" | "llama-bpe" | "smaug-bpe" | "falcon3" | "pixtral" => {
            Sequence::new(vec![split(LLAMA3_REGEX)?, byte_level_only.into()]).into()
        }
        "qwen2" | "deepseek-r1-qwen" => {
            Sequence::new(vec![split(QWEN2_REGEX)?, byte_level_only.into()]).into()
        }
        "default" | "gpt2" | "gpt-2" | "olmo" | "mpt" | "jais" => byte_level_regex.into(),
        other => {
            return Err(TokenizerError::Vocab(format!(
                "unsupported pre-tokenizer `{other}` (tokenizer.ggml.pre); pass --tokenizer \
                 with the model's tokenizer.json"
            )));
        }
    })
}

/// Builds the tokenizer of a `gpt2`-model GGUF.
pub fn build(file: &GgufFile) -> Result<tokenizers::Tokenizer, ModelError> {
    let model = file.get_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(TokenizerError::Vocab(format!(
            "tokenizer model `{model}` (tokenizer.ggml.model) is not supported from GGUF \
             metadata; pass --tokenizer with the model's tokenizer.json"
        ))
        .into());
    }
    let tokens = strings(file, "tokenizer.ggml.tokens")?;
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
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| TokenizerError::Vocab(e.to_string()))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    let pre = file.get_str("tokenizer.ggml.pre").unwrap_or("default");
    tok.with_pre_tokenizer(Some(pre_tokenizer(pre)?));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    let types = token_types(file);
    let specials: Vec<AddedToken> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| matches!(**t, TOKEN_CONTROL | TOKEN_USER_DEFINED))
        .filter_map(|(i, _)| tokens.get(i))
        .map(|t| AddedToken::from(t.clone(), true))
        .collect();
    tok.add_special_tokens(&specials);
    Ok(tok)
}

/// Ids that end a generation: the declared EOS plus the usual end-of-turn tokens that
/// exist in the vocabulary (as llama.cpp's end-of-generation set).
pub fn end_ids(file: &GgufFile, tok: &tokenizers::Tokenizer) -> Vec<u32> {
    let mut ids = Vec::new();
    if let Ok(eos) = file.get_u64("tokenizer.ggml.eos_token_id") {
        ids.push(eos as u32);
    }
    for name in [
        "<|endoftext|>",
        "<|im_end|>",
        "<|eot_id|>",
        "<|end_of_text|>",
        "<end_of_turn>",
        "<|end|>",
        "</s>",
    ] {
        if let Some(id) = tok.token_to_id(name)
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    ids
}
