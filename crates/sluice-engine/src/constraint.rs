//! Constrained decoding (docs/ARCHITECTURE.md, "Constrained decoding"): a grammar (JSON
//! Schema, regex, Lark, a list of choices) is compiled by llguidance when the request is
//! validated, and each running sequence gets its own matcher. Before every sampling step
//! the matcher's token mask removes what the grammar cannot continue with; the sampled
//! token is then fed back to it. Masks are computed for all sequences in parallel, beside
//! the forward pass, never one after another on the engine thread.

use std::fmt;
use std::sync::Arc;

use mistralrs_core::llguidance::api::TopLevelGrammar;
pub(crate) use mistralrs_core::llguidance::toktrie::SimpleVob;
use mistralrs_core::llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use mistralrs_core::llguidance::{Matcher, ParserFactory, TokenParser};

use crate::tokenizer::Tokenizer;

/// What a request constrains its output to.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (`response_format: json_object`).
    JsonObject,
    /// JSON valid against a schema.
    JsonSchema(serde_json::Value),
    /// Text matching a regular expression (whole output).
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// A Lark grammar (llguidance's dialect).
    Lark(String),
}

impl GrammarSpec {
    /// The metrics label of this kind.
    pub fn kind(&self) -> &'static str {
        match self {
            GrammarSpec::JsonObject => "json_object",
            GrammarSpec::JsonSchema(_) => "json_schema",
            GrammarSpec::Regex(_) => "regex",
            GrammarSpec::Choice(_) => "choice",
            GrammarSpec::Lark(_) => "grammar",
        }
    }

    fn grammar(&self) -> TopLevelGrammar {
        match self {
            GrammarSpec::JsonObject => TopLevelGrammar::from_json_schema(json_layout(
                serde_json::json!({"type": "object"}),
            )),
            GrammarSpec::JsonSchema(s) => TopLevelGrammar::from_json_schema(json_layout(s.clone())),
            GrammarSpec::Regex(r) => TopLevelGrammar::from_regex(r),
            GrammarSpec::Choice(c) => {
                let alts: Vec<String> = c
                    .iter()
                    .map(|s| serde_json::to_string(s).expect("a string serialises"))
                    .collect();
                TopLevelGrammar::from_lark(format!("start: {}", alts.join(" | ")))
            }
            GrammarSpec::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        }
    }
}

/// The JSON layout constrained output uses unless the schema sets its own (llguidance's
/// `x-guidance` options): `", "` and `": "` between items, no other whitespace, so a
/// model cannot pad its answer with blank lines until `max_tokens`.
pub fn json_layout(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}

/// A compiled grammar, ready to give each sequence its own matcher.
#[derive(Clone)]
pub struct Constraint {
    /// The metrics label.
    pub kind: &'static str,
    /// Shared by the request's choices; each matcher starts from a deep copy.
    parser: Arc<TokenParser>,
}

impl fmt::Debug for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Constraint")
            .field("kind", &self.kind)
            .finish()
    }
}

impl Constraint {
    /// A fresh matcher at the start of the output.
    pub(crate) fn matcher(&self) -> Matcher {
        Matcher::new(Ok(self.parser.deep_clone()))
    }
}

/// The tokenizer as llguidance sees it: every token's bytes, and text to ids.
struct Env {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Bytes the grammar forces may end inside a character (a marker such as
        // DeepSeek's `<｜tool▁sep｜>` written in a vocabulary without it): the whole
        // characters go through the tokenizer, the rest byte by byte through the trie.
        self.trie.tokenize_with_greedy_fallback(s, |t| {
            self.tok.encode_with(t, false, false).unwrap_or_default()
        })
    }
}

/// Compiles grammars for one tokenizer (built once at start-up: the token trie takes a
/// moment for a large vocabulary).
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    /// The compiler for `tok`; its end ids are what a finished grammar allows.
    pub fn new(tok: Arc<Tokenizer>) -> Result<Self, String> {
        let words = tok.token_bytes();
        // End ids outside the vocabulary (a `--tokenizer` file smaller than the model's)
        // cannot be given to the trie.
        let ends: Vec<u32> = tok
            .end_ids
            .iter()
            .copied()
            .filter(|&e| (e as usize) < words.len())
            .collect();
        let eos = *ends.first().ok_or("the vocabulary has no end token")?;
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&ends);
        let env: TokEnv = Arc::new(Env { trie, tok });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(Self { factory })
    }

    /// Compiles `spec`; the error names what is wrong with it.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Constraint, String> {
        let parser = self
            .factory
            .create_parser(spec.grammar())
            .map_err(|e| e.to_string())?;
        Ok(Constraint {
            kind: spec.kind(),
            parser: Arc::new(parser),
        })
    }
}

/// A sequence's matcher and the mask for its next token.
pub(crate) struct Guide {
    pub matcher: Matcher,
    pub mask: Option<SimpleVob>,
}

impl Guide {
    pub(crate) fn new(c: &Constraint) -> Self {
        Self {
            matcher: c.matcher(),
            mask: None,
        }
    }

    /// Computes the mask for the next token (only end tokens once the grammar is done).
    pub(crate) fn compute(&mut self) -> Result<(), String> {
        let m = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string())?;
        self.mask = Some(m);
        Ok(())
    }

    /// Feeds the sampled token.
    pub(crate) fn commit(&mut self, token: u32) -> Result<(), String> {
        self.mask = None;
        self.matcher.consume_token(token).map_err(|e| e.to_string())
    }
}

/// Sets every logit the mask forbids to -inf.
/// Ids past the tokenizer's vocabulary (padding rows of the output matrix) are forbidden.
pub(crate) fn apply(mask: &SimpleVob, logits: &mut [f32]) {
    let words = mask.as_slice();
    for (i, l) in logits.iter_mut().enumerate() {
        let allowed = i < mask.len() && words[i / 32] & (1 << (i % 32)) != 0;
        if !allowed {
            *l = f32::NEG_INFINITY;
        }
    }
}
