//! The model's chat template (`tokenizer.chat_template`), rendered with minijinja.

use minijinja::{Environment, ErrorKind, context};
use serde::{Deserialize, Serialize};

use super::TokenizerError;
use crate::gguf::GgufFile;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// The message text.
    pub content: String,
}

/// A compiled chat template with the special tokens it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

fn special(file: &GgufFile, tok: &tokenizers::Tokenizer, key: &str) -> String {
    file.get_u64(key)
        .ok()
        .and_then(|id| tok.id_to_token(id as u32))
        .unwrap_or_default()
}

impl ChatTemplate {
    /// Compiles `source`; a template that does not parse is an error at load time.
    pub fn new(
        source: &str,
        tok: &tokenizers::Tokenizer,
        file: &GgufFile,
    ) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| TokenizerError::TemplateSyntax(e.to_string()))?;
        Ok(Self {
            env,
            bos: special(file, tok, "tokenizer.ggml.bos_token_id"),
            eos: special(file, tok, "tokenizer.ggml.eos_token_id"),
        })
    }

    /// The conversation as prompt text, ending with the assistant's generation prompt.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, TokenizerError> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| TokenizerError::Template(e.to_string()))?;
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => self.bos,
            eos_token => self.eos,
        })
        .map_err(|e| TokenizerError::Template(e.to_string()))
    }
}
