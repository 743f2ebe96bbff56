//! Tokenisation (built from the GGUF vocabulary or a `tokenizer.json`), the chat template
//! and UTF-8-safe incremental detokenisation.

mod bytes;
mod chat;
mod gguf_vocab;
mod incremental;
mod python;
mod special;
mod spm;

use std::path::Path;

pub use chat::{ChatMessage, ChatTemplate};
pub use incremental::IncrementalDecoder;

use crate::error::{ModelError, TokenizerError};
use crate::gguf::GgufFile;

/// What turns raw text (between special tokens) into ids.
pub(crate) enum Model {
    /// A SentencePiece vocabulary with scores.
    Spm(Box<spm::Spm>),
    /// A byte-level BPE built from the GGUF vocabulary.
    Bpe(tokenizers::Tokenizer),
    /// A user's `tokenizer.json`, run as a whole (its own special-token handling).
    Json(tokenizers::Tokenizer),
}

/// The model's tokenizer plus the special ids the engine needs.
pub struct Tokenizer {
    model: Model,
    /// GGUF token types by id (empty for a `tokenizer.json`).
    types: Vec<u32>,
    specials: Vec<special::Special>,
    add_space_prefix: bool,
    /// The beginning-of-sequence id.
    pub bos: Option<u32>,
    /// Whether a text prompt starts with BOS (added when the text does not carry it).
    pub add_bos: bool,
    /// Ids that end generation (EOS and the other end-of-turn control tokens).
    pub end_ids: Vec<u32>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Chat template, when the model has one.
    pub chat_template: Option<ChatTemplate>,
}

impl Tokenizer {
    /// Wraps a `tokenizers` tokenizer with the ids that end generation (no chat template).
    pub fn new(inner: tokenizers::Tokenizer, end_ids: Vec<u32>) -> Self {
        Self {
            vocab_size: inner.get_vocab_size(true),
            model: Model::Json(inner),
            types: Vec::new(),
            specials: Vec::new(),
            add_space_prefix: false,
            bos: None,
            add_bos: false,
            end_ids,
            chat_template: None,
        }
    }

    /// Builds the tokenizer from the GGUF metadata, or from `tokenizer_json` when given;
    /// `template` replaces the file's chat template (else the family's built-in one is
    /// used when the file has none).
    pub fn from_gguf(
        file: &GgufFile,
        tokenizer_json: Option<&Path>,
        template: Option<&str>,
    ) -> Result<Self, ModelError> {
        let vocab = match tokenizer_json {
            // A vocabulary sluice cannot run is fine when a tokenizer.json replaces it.
            Some(_) => gguf_vocab::read(file).unwrap_or_else(|_| gguf_vocab::ids_only(file)),
            None => gguf_vocab::read(file)?,
        };
        let (model, types, specials) = match tokenizer_json {
            Some(p) => {
                let t = tokenizers::Tokenizer::from_file(p).map_err(|e| TokenizerError::File {
                    path: p.display().to_string(),
                    reason: e.to_string(),
                })?;
                (Model::Json(t), Vec::new(), Vec::new())
            }
            None => (vocab.model, vocab.types, vocab.specials),
        };
        let mut tok = Self {
            vocab_size: match &model {
                Model::Spm(s) => s.tokens.len(),
                Model::Bpe(t) | Model::Json(t) => t.get_vocab_size(true),
            },
            model,
            types,
            specials,
            add_space_prefix: vocab.add_space_prefix,
            bos: vocab.bos,
            add_bos: vocab.add_bos && vocab.bos.is_some(),
            end_ids: Vec::new(),
            chat_template: None,
        };
        tok.end_ids = gguf_vocab::end_ids(file, |t| tok.id(t));
        let text = |id: Option<u32>| id.and_then(|i| vocab.tokens.get(i as usize)).cloned();
        let source = match template {
            Some(t) => Some(t.to_string()),
            None => file
                .get_str("tokenizer.chat_template")
                .ok()
                .map(str::to_string)
                .or_else(|| chat::builtin(file).map(str::to_string)),
        };
        tok.chat_template = source
            .map(|s| {
                ChatTemplate::new(
                    &s,
                    text(vocab.bos).unwrap_or_default(),
                    text(vocab.eos).unwrap_or_default(),
                )
            })
            .transpose()?;
        Ok(tok)
    }

    /// The id of a token's text.
    pub fn id(&self, text: &str) -> Option<u32> {
        match &self.model {
            Model::Spm(s) => s.id(text),
            Model::Bpe(t) | Model::Json(t) => t.token_to_id(text),
        }
    }

    /// Token ids of a prompt: special tokens such as `<|im_start|>` parsed as single ids,
    /// and BOS first when the model wants one and the text does not already start with it
    /// (a chat template that writes `<bos>` gets exactly one).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = self.encode_with(text, false, true)?;
        if let (true, Some(bos)) = (self.add_bos, self.bos)
            && ids.first() != Some(&bos)
        {
            ids.insert(0, bos);
        }
        Ok(ids)
    }

    /// Token ids as llama.cpp's `llama_tokenize(text, add_special, parse_special)` gives
    /// them.
    pub fn encode_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::new();
        if let Model::Json(t) = &self.model {
            out = t
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| TokenizerError::Encode(e.to_string()))?;
            return Ok(out);
        }
        if let (true, true, Some(bos)) = (add_special, self.add_bos, self.bos) {
            out.push(bos);
        }
        let mut prev_special = true;
        for f in special::partition(text, &self.specials, parse_special) {
            match (f, &self.model) {
                (special::Fragment::Token(id), _) => {
                    out.push(id);
                    prev_special = true;
                }
                (special::Fragment::Text(t), Model::Spm(spm)) => {
                    let mut s = String::with_capacity(t.len() + 3);
                    if self.add_space_prefix && prev_special {
                        s.push(' ');
                    }
                    s.push_str(t);
                    spm.tokenize(&s.replace(' ', "\u{2581}"), &mut out);
                    prev_special = false;
                }
                (special::Fragment::Text(t), Model::Bpe(bpe) | Model::Json(bpe)) => {
                    let e = bpe
                        .encode(t, false)
                        .map_err(|e| TokenizerError::Encode(e.to_string()))?;
                    out.extend_from_slice(e.get_ids());
                }
            }
        }
        Ok(out)
    }

    /// Text of `ids`, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        match &self.model {
            Model::Spm(spm) => {
                let mut bytes = Vec::new();
                for &id in ids {
                    let text = spm.tokens.get(id as usize).ok_or_else(|| {
                        TokenizerError::Decode(format!("id {id} is not in the vocabulary"))
                    })?;
                    match self.types.get(id as usize).copied() {
                        Some(gguf_vocab::kind::BYTE) => bytes.extend(spm.byte_of(id)),
                        Some(gguf_vocab::kind::UNUSED) => {}
                        Some(gguf_vocab::kind::NORMAL) | None => {
                            bytes.extend_from_slice(text.replace('\u{2581}', " ").as_bytes())
                        }
                        Some(_) => bytes.extend_from_slice(text.as_bytes()),
                    }
                }
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            Model::Bpe(t) | Model::Json(t) => t
                .decode(ids, false)
                .map_err(|e| TokenizerError::Decode(e.to_string())),
        }
    }

    /// The tokenizer in `tokenizer.json` form (what `--tokenizer` loads); not available
    /// for SentencePiece vocabularies.
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        match &self.model {
            Model::Spm(_) => Err(TokenizerError::Vocab(
                "a SentencePiece vocabulary has no tokenizer.json form here".into(),
            )),
            Model::Bpe(t) | Model::Json(t) => {
                // The GGUF-built BPE leaves special tokens to `special.rs`; as a file it
                // must split them itself.
                let mut t = t.clone();
                t.set_encode_special_tokens(false);
                t.to_string(false)
                    .map_err(|e| TokenizerError::Vocab(e.to_string()))
            }
        }
    }

    /// Renders a conversation through the chat template with the generation prompt.
    pub fn apply_chat_template(&self, messages: &[ChatMessage]) -> Result<String, TokenizerError> {
        self.chat_template
            .as_ref()
            .ok_or(TokenizerError::NoChatTemplate)?
            .render(messages)
    }
}
