//! The model's chat template (`tokenizer.chat_template`, a `--chat-template` file, or the
//! family's built-in one), rendered with minijinja.

use std::sync::{Arc, mpsc};
use std::time::Duration;

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
    env: Arc<Environment<'static>>,
    bos: String,
    eos: String,
    /// The template text (what tool-call format the model was taught is read from it).
    pub source: String,
    time_limit: Duration,
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

/// Instructions one rendering may execute. A chat template comes with the model file, so
/// it is untrusted: nested loops could keep a thread busy for hours. Real templates take a
/// few hundred instructions per message (Qwen 2.5's with tools: under 2,000), so this
/// allows conversations of thousands of messages and stops a runaway template within a
/// fraction of a second.
const FUEL: u64 = 5_000_000;

/// Nesting (loops, macros, includes) one rendering may reach.
const RECURSION: usize = 64;

/// Longest one rendering may take. The fuel bounds the instructions, not what one costs
/// (a filter over a 100 MB string is one instruction); real templates take well under a
/// millisecond.
pub const TIME_LIMIT: Duration = Duration::from_secs(2);

/// What a rendering over the time limit is told.
const SLOW: &str = "ran past its time limit";

impl ChatTemplate {
    /// Compiles `source`; a template that does not parse is an error at load time, and so is
    /// one that cannot render a one-message conversation within its fuel.
    pub fn new(source: &str, bos: String, eos: String) -> Result<Self, TokenizerError> {
        Self::with_time_limit(source, bos, eos, TIME_LIMIT)
    }

    /// As [`ChatTemplate::new`], with another bound on one rendering's time.
    pub fn with_time_limit(
        source: &str,
        bos: String,
        eos: String,
        time_limit: Duration,
    ) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", super::python::tojson);
        env.add_function("strftime_now", |f: String| super::python::strftime_now(&f));
        // As transformers compiles chat templates: a block tag's newline is dropped, and
        // the spaces before it on its line.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| TokenizerError::TemplateSyntax(e.to_string()))?;
        let t = Self {
            env: Arc::new(env),
            bos,
            eos,
            source: source.to_string(),
            time_limit,
        };
        // A template may refuse a conversation on purpose (`raise_exception`); one that
        // exhausts its limits on the smallest one is broken or hostile.
        let hello = [ChatMessage::text("user", "Hello")];
        if let Err(TokenizerError::Template(e)) = t.render(&hello)
            && (e.contains("fuel") || e.contains("recursion") || e.contains(SLOW))
        {
            return Err(TokenizerError::TemplateSyntax(format!(
                "the chat template cannot render a one-message conversation: {e}"
            )));
        }
        Ok(t)
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
        self.render_with_kwargs(messages, tools, &serde_json::Map::new())
    }

    /// As `render_with_tools`, with more variables for the template (a request's
    /// `chat_template_kwargs`, such as `enable_thinking`), as transformers'
    /// `apply_chat_template` passes them.
    pub fn render_with_kwargs(
        &self,
        messages: &[ChatMessage],
        tools: Option<&[serde_json::Value]>,
        kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String, TokenizerError> {
        let ctx = context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => true,
            bos_token => self.bos,
            eos_token => self.eos,
            ..minijinja::Value::from_serialize(kwargs)
        };
        // On a thread of its own, so that the caller can stop waiting at the time limit;
        // a rendering left behind ends when its fuel does.
        let env = self.env.clone();
        let (tx, rx) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("chat-template".into())
            .spawn(move || {
                let out = env.get_template("chat").and_then(|t| t.render(ctx));
                let _ = tx.send(out.map_err(|e| e.to_string()));
            })
            .map_err(|e| TokenizerError::Template(format!("no thread to render on: {e}")))?;
        match rx.recv_timeout(self.time_limit) {
            Ok(out) => out.map_err(TokenizerError::Template),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(TokenizerError::Template(format!(
                "the chat template {SLOW} ({} ms)",
                self.time_limit.as_millis()
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(TokenizerError::Template(
                "the chat template's rendering failed".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(source: &str) -> Result<ChatTemplate, TokenizerError> {
        ChatTemplate::new(source, "<s>".into(), "</s>".into())
    }

    fn talk(n: usize) -> Vec<ChatMessage> {
        (0..n)
            .map(|i| ChatMessage::text("user", &format!("m{i}")))
            .collect()
    }

    #[test]
    fn a_template_that_loops_without_end_is_refused_at_load() {
        let e = template(
            "{% for i in range(10000) %}{% for j in range(10000) %}x{% endfor %}{% endfor %}",
        )
        .err()
        .expect("refused");
        assert!(e.to_string().contains("fuel"), "{e}");
        let deep = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
        let e = template(deep).err().expect("refused");
        assert!(e.to_string().contains("recursion"), "{e}");
    }

    #[test]
    fn a_template_that_explodes_on_long_conversations_fails_that_request_only() {
        // Quadratic in the messages, with a large constant: fine for one, not for 100.
        let t = template(
            "{% for m in messages %}{% for n in messages %}{% for i in range(2000) %}\
             {% endfor %}{% endfor %}{{ m.content }}{% endfor %}",
        )
        .expect("a one-message conversation renders");
        assert_eq!(t.render(&talk(1)).unwrap(), "m0");
        // 20M iterations: the fuel stops it after 5M instructions.
        let e = t.render(&talk(100)).expect_err("out of fuel");
        assert!(
            matches!(e, TokenizerError::Template(ref m) if m.contains("fuel")),
            "{e}"
        );
        // And the template still serves short conversations.
        assert_eq!(t.render(&talk(2)).unwrap(), "m0m1");
    }

    #[test]
    fn a_template_slower_than_its_time_limit_fails_that_request_only() {
        // Few instructions, each over a 20 MB string: the fuel never runs out.
        let slow = "{% if messages|length > 1 %}{% set s = 'x' * 20000000 %}\
                    {% for i in range(100) %}{% if (s|upper)|length < 1 %}{% endif %}\
                    {% endfor %}{% endif %}{{ messages|length }}";
        let limit = Duration::from_millis(200);
        let t = ChatTemplate::with_time_limit(slow, String::new(), String::new(), limit)
            .expect("one message renders at once");
        let start = std::time::Instant::now();
        let e = t.render(&talk(2)).expect_err("over its time");
        assert!(e.to_string().contains(SLOW), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(t.render(&talk(1)).unwrap(), "1");
        // At load, a template too slow for one message is refused.
        let e = ChatTemplate::with_time_limit(
            &slow.replace("> 1", "> 0"),
            String::new(),
            String::new(),
            limit,
        )
        .err()
        .expect("refused");
        assert!(e.to_string().contains(SLOW), "{e}");
    }

    #[test]
    fn real_templates_render_long_conversations_within_the_fuel() {
        let t = template(GEMMA3).unwrap();
        let long: Vec<ChatMessage> = (0..2000)
            .map(|i| ChatMessage::text(if i % 2 == 0 { "user" } else { "assistant" }, "hi"))
            .collect();
        assert!(t.render(&long).unwrap().matches("<start_of_turn>").count() >= 2000);
    }
}
