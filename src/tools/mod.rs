//! Tool calling: how a model family writes a call (`ToolFormat`), how an answer's calls
//! are read out of its text (`CallReader`), the prompt block that describes the tools
//! when the chat template has no `tools` variable, and the grammar that makes a required
//! call always parse (docs/ARCHITECTURE.md, "Tool calls").

pub mod parse;
pub mod stream;

use serde_json::{Value, json};
use sluice_engine::GrammarSpec;
use sluice_engine::json_layout;

pub use stream::ToolStream;

use crate::api::tools::Tool;
use parse::{Parsed, parse};

/// How a model writes its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// Hermes / Qwen: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
    Hermes,
    /// Llama 3.x: `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`.
    Llama3,
    /// Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`.
    Mistral,
}

impl ToolFormat {
    /// The format named by `--tool-call-parser`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "hermes" | "qwen" => Some(Self::Hermes),
            "llama3" | "llama3_json" => Some(Self::Llama3),
            "mistral" => Some(Self::Mistral),
            _ => None,
        }
    }

    /// The format a chat template teaches (Hermes when it shows none).
    pub fn of_template(source: Option<&str>) -> Self {
        match source {
            // Hermes first: Hermes 2 Pro / 3 templates also show `"parameters": `.
            Some(s) if s.contains("<tool_call>") => Self::Hermes,
            Some(s) if s.contains("[TOOL_CALLS]") => Self::Mistral,
            Some(s) if s.contains("<|python_tag|>") || s.contains("\"parameters\": ") => {
                Self::Llama3
            }
            _ => Self::Hermes,
        }
    }

    /// The key that holds a call's arguments.
    pub fn arguments_key(self) -> &'static str {
        match self {
            Self::Llama3 => "parameters",
            _ => "arguments",
        }
    }

    /// One call as the model writes it.
    pub fn write_call(self, name: &str, arguments: &Value) -> String {
        self.write_call_text(
            &serde_json::to_string(name).expect("a string serialises"),
            &arguments.to_string(),
        )
    }

    /// As `write_call`, from the JSON texts of the name and the arguments.
    fn write_call_text(self, name: &str, arguments: &str) -> String {
        let body = format!(
            "{{\"name\": {name}, \"{}\": {arguments}}}",
            self.arguments_key()
        );
        match self {
            Self::Hermes => format!("<tool_call>\n{body}\n</tool_call>"),
            Self::Llama3 => body.to_string(),
            Self::Mistral => format!("[TOOL_CALLS][{body}]"),
        }
    }
}

/// How the tool calls of a request's answers are read: the format the model writes them
/// in, the functions that may be called, and whether calls after the first are kept
/// (`parallel_tool_calls`).
#[derive(Clone, Debug, PartialEq)]
pub struct CallReader {
    /// The format of the calls.
    pub format: ToolFormat,
    /// The functions that may be called (a call to another name is content).
    pub names: Vec<String>,
    /// Keep every call, else only the first.
    pub parallel: bool,
}

impl CallReader {
    /// The content and the calls of a whole answer.
    pub fn read(&self, text: &str) -> Parsed {
        let mut p = parse(self.format, text, &self.names);
        if !self.parallel {
            p.calls.truncate(1);
        }
        p
    }

    /// A reader of one streamed answer.
    pub fn stream(&self) -> ToolStream {
        ToolStream::new(self.clone())
    }
}

/// The function definitions as chat templates take them (`tools` variable).
pub fn template_tools(tools: &[Tool]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| serde_json::to_value(t).expect("tools serialise"))
        .collect()
}

/// The system text that describes the tools when the template cannot (documented in the
/// README, "Tools").
pub fn default_system_block(tools: &[Tool], format: ToolFormat) -> String {
    let mut s = String::from(
        "You can call functions. To call one, answer with the call and nothing else, in \
         this form:\n",
    );
    s.push_str(&format.write_call_text("\"<function-name>\"", "{<arguments as a JSON object>}"));
    s.push_str("\n\nThe functions:\n");
    for t in template_tools(tools) {
        s.push_str(&t.to_string());
        s.push('\n');
    }
    s
}

/// The JSON Schema of one call to `t`.
fn call_schema(t: &Tool, format: ToolFormat) -> Value {
    let params = t
        .function
        .parameters
        .clone()
        .unwrap_or_else(|| json!({"type": "object"}));
    json!({
        "type": "object",
        "properties": {
            "name": {"const": t.function.name},
            format.arguments_key(): params,
        },
        "required": ["name", format.arguments_key()],
        "additionalProperties": false,
    })
}

/// The grammar of the output when a call is required: one call (or several, if
/// `parallel`) to one of `tools`, in `format`.
///
/// `marker` is the id of the format's marker when the vocabulary has it as one (control)
/// token: Mistral's `[TOOL_CALLS]` is then required as that token, as the model writes it.
pub fn call_grammar(
    tools: &[&Tool],
    format: ToolFormat,
    parallel: bool,
    marker: Option<u32>,
) -> GrammarSpec {
    let schema = match tools {
        [one] => call_schema(one, format),
        many => json!({"anyOf": many.iter().map(|t| call_schema(t, format)).collect::<Vec<_>>()}),
    };
    let body = format!("%json {}", json_layout(schema));
    let tag = match marker {
        Some(id) => format!("<[{id}]>"),
        None => "\"[TOOL_CALLS]\"".to_string(),
    };
    let lark = match (format, parallel) {
        (ToolFormat::Hermes, false) => {
            format!("start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: {body}")
        }
        (ToolFormat::Hermes, true) => format!(
            "start: one (\"\\n\" one)*\none: \"<tool_call>\\n\" call \"\\n</tool_call>\"\n\
             call: {body}"
        ),
        (ToolFormat::Llama3, false) => format!("start: call\ncall: {body}"),
        (ToolFormat::Llama3, true) => format!("start: call (\"; \" call)*\ncall: {body}"),
        (ToolFormat::Mistral, false) => format!("start: {tag} \"[\" call \"]\"\ncall: {body}"),
        (ToolFormat::Mistral, true) => {
            format!("start: {tag} \"[\" call (\", \" call)* \"]\"\ncall: {body}")
        }
    };
    GrammarSpec::Lark(lark)
}
