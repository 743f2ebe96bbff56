//! The model's chat template (`tokenizer.chat_template`, a `--chat-template` file, or the
//! family's built-in one), rendered with minijinja.

use minijinja::{Environment, ErrorKind, context};
use serde::{Deserialize, Serialize};

use crate::error::TokenizerError;
use crate::gguf::GgufFile;

/// One message of a conversation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`...
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant's tool calls, in Hugging Face templates' form: `{id, type: "function",
    /// function: {name, arguments}}` with `arguments` an object.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// The call a `tool` message answers.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tool_call_id: Option<String>,
    /// The function a `tool` message comes from.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A plain text message.
    pub fn text(role: &str, content: &str) -> Self {
        Self {
            role: role.to_string(),
            content: content.to_string(),
            ..Self::default()
        }
    }
}

/// A compiled chat template with the special tokens it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// The template text (what tool-call format the model was taught is read from it).
    pub source: String,
}

/// Gemma 3's template (from its `tokenizer_config.json`): a system message is folded into
/// the first user turn, the assistant role is `model`, and every turn ends with
/// `<end_of_turn>`.
const GEMMA3: &str = r#"{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"#;

/// The built-in template of a family whose files may come without one.
pub fn builtin(file: &GgufFile) -> Option<&'static str> {
    match file.get_str("general.architecture").ok()? {
        "gemma3" | "gemma2" | "gemma" => Some(GEMMA3),
        _ => None,
    }
}

impl ChatTemplate {
    /// Compiles `source`; a template that does not parse is an error at load time.
    pub fn new(source: &str, bos: String, eos: String) -> Result<Self, TokenizerError> {
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
            bos,
            eos,
            source: source.to_string(),
        })
    }

    /// Whether the template renders a `tools` list itself.
    pub fn takes_tools(&self) -> bool {
        self.source.contains("tools")
    }

    /// The conversation as prompt text, ending with the assistant's generation prompt.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, TokenizerError> {
        self.render_with_tools(messages, None)
    }

    /// As `render`, with the function definitions in the template's `tools` variable.
    pub fn render_with_tools(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
    ) -> Result<String, TokenizerError> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| TokenizerError::Template(e.to_string()))?;
        tmpl.render(context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => true,
            bos_token => self.bos,
            eos_token => self.eos,
        })
        .map_err(|e| TokenizerError::Template(e.to_string()))
    }
}
