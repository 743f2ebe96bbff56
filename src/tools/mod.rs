//! Tool calling: how a model family writes a call (`ToolFormat`), how an answer's calls
//! are read out of its text as it streams (`CallReader`), the prompt block that describes
//! the tools when the chat template has no `tools` variable, and the grammar that makes a
//! required call always parse (docs/ARCHITECTURE.md, "Tool calls").

mod deepseek;
mod grammar;
mod lenient;
pub mod parse;
mod scan;
mod sections;
pub mod stream;
mod xml;

use std::collections::HashMap;

use serde_json::Value;

pub use grammar::call_grammar;
pub use stream::ToolStream;

use crate::api::tools::Tool;
use lenient::{Fence, FunctionTag, PythonTag, TAGS};
use parse::Parsed;
use scan::{COHERE, PLAIN};
use sections::{DeepSeek, JsonCalls, MistralArgs, Nothing, QwenXml, Section};

/// How a model writes its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// Hermes 2 Pro / 3, Qwen 2.5 / 3, SmolLM3, Granite 4:
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
    Hermes,
    /// Llama 3.x: `{"name": ..., "parameters": {...}}` as the whole answer, or after
    /// `<|python_tag|>`.
    Llama3,
    /// Mistral Nemo: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`.
    Mistral,
    /// Mistral Small 3.2, Devstral, Ministral: `[TOOL_CALLS]name[ARGS]{...}`.
    MistralArgs,
    /// Qwen3-Coder, Qwen 3.5: `<tool_call>\n<function=name>\n<parameter=p>\nvalue\n
    /// </parameter>\n</function>\n</tool_call>`.
    Qwen3Coder,
    /// Granite 3.x, Phi-4-mini: `<|tool_call|>[{"name": ..., "arguments": {...}}]`.
    Granite,
    /// DeepSeek R1 and its distills: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
    /// <｜tool▁sep｜>name` and the arguments in a JSON fence.
    DeepSeekR1,
    /// Command R7B: `<|START_ACTION|>[{"tool_call_id": ..., "tool_name": ...,
    /// "parameters": {...}}]<|END_ACTION|>`.
    CommandR,
}

/// Text that opens a section of calls: whether the reader takes the marker itself, or
/// starts reading at it.
struct Opener {
    pub text: &'static str,
    pub eaten: bool,
}

impl ToolFormat {
    /// Every format, for tests and `--tool-call-parser`'s help.
    pub const ALL: [ToolFormat; 8] = [
        Self::Hermes,
        Self::Llama3,
        Self::Mistral,
        Self::MistralArgs,
        Self::Qwen3Coder,
        Self::Granite,
        Self::DeepSeekR1,
        Self::CommandR,
    ];

    /// The format named by `--tool-call-parser`.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "hermes" | "qwen" => Self::Hermes,
            "llama3" | "llama3_json" => Self::Llama3,
            "mistral" => Self::Mistral,
            "mistral_args" => Self::MistralArgs,
            "qwen3_coder" => Self::Qwen3Coder,
            "granite" | "phi4_mini_json" => Self::Granite,
            "deepseek_r1" => Self::DeepSeekR1,
            "command_r7b" => Self::CommandR,
            _ => return None,
        })
    }

    /// The format a chat template teaches (Hermes when it shows none).
    pub fn of_template(source: Option<&str>) -> Self {
        let Some(s) = source else {
            return Self::Hermes;
        };
        if s.contains("<function=") && s.contains("<parameter=") {
            Self::Qwen3Coder
        } else if s.contains("tool▁calls▁begin") {
            Self::DeepSeekR1
        } else if s.contains("<|START_ACTION|>") {
            Self::CommandR
        } else if s.contains("[ARGS]") {
            Self::MistralArgs
        } else if s.contains("<|tool_call|>") {
            Self::Granite
        // Hermes before Llama 3: Hermes 2 Pro / 3 templates also show `"parameters": `.
        } else if s.contains("<tool_call>") {
            Self::Hermes
        } else if s.contains("[TOOL_CALLS]") {
            Self::Mistral
        } else if s.contains("<|python_tag|>") || s.contains("\"parameters\": ") {
            Self::Llama3
        } else {
            Self::Hermes
        }
    }

    /// The markers that open a section of calls.
    fn openers(self) -> &'static [Opener] {
        match self {
            // Hermes-style models also wrap calls in other tags or fences, or write them
            // bare (llama.cpp's parser takes these too).
            Self::Hermes => &[
                Opener {
                    text: "<tool_call>",
                    eaten: true,
                },
                Opener {
                    text: "<function_call>",
                    eaten: true,
                },
                Opener {
                    text: "<tools>",
                    eaten: true,
                },
                Opener {
                    text: "<tool>",
                    eaten: true,
                },
                Opener {
                    text: "<response>",
                    eaten: true,
                },
                Opener {
                    text: "<json>",
                    eaten: true,
                },
                Opener {
                    text: "<xml>",
                    eaten: true,
                },
                Opener {
                    text: "<JSON>",
                    eaten: true,
                },
                Opener {
                    text: "<function",
                    eaten: true,
                },
                Opener {
                    text: "```",
                    eaten: true,
                },
                Opener {
                    text: "{",
                    eaten: false,
                },
            ],
            Self::Qwen3Coder => &[
                Opener {
                    text: "<tool_call>",
                    eaten: true,
                },
                Opener {
                    text: "<function=",
                    eaten: false,
                },
            ],
            Self::Llama3 => &[Opener {
                text: "<|python_tag|>",
                eaten: true,
            }],
            Self::Mistral | Self::MistralArgs => &[Opener {
                text: "[TOOL_CALLS]",
                eaten: true,
            }],
            Self::Granite => &[Opener {
                text: "<|tool_call|>",
                eaten: true,
            }],
            Self::DeepSeekR1 => &[
                Opener {
                    text: "<｜tool▁calls▁begin｜>",
                    eaten: true,
                },
                Opener {
                    text: "<｜tool▁calls｜>",
                    eaten: true,
                },
                Opener {
                    text: "<｜tool▁call▁begin｜>",
                    eaten: false,
                },
            ],
            Self::CommandR => &[
                Opener {
                    text: "<|START_ACTION|>",
                    eaten: true,
                },
                Opener {
                    text: "<|START_RESPONSE|>",
                    eaten: true,
                },
                Opener {
                    text: "<|END_RESPONSE|>",
                    eaten: true,
                },
            ],
        }
    }

    /// A reader of the section `opener` opens.
    fn section(self, opener: &str) -> Box<dyn Section + Send> {
        match self {
            Self::Hermes => match opener {
                "<function" => Box::new(FunctionTag::new()),
                "```" => Box::new(Fence::new()),
                _ => {
                    let close = TAGS.iter().find(|(o, _)| *o == opener).map(|(_, c)| c);
                    Box::new(JsonCalls::new(
                        PLAIN,
                        false,
                        false,
                        close.map_or(&[], std::slice::from_ref),
                    ))
                }
            },
            Self::Llama3 if opener.is_empty() => Box::new(JsonCalls::new(PLAIN, false, true, &[])),
            Self::Llama3 => Box::new(PythonTag::new()),
            Self::Mistral => Box::new(JsonCalls::new(PLAIN, true, false, &[])),
            Self::Granite => Box::new(JsonCalls::new(PLAIN, true, false, &["<|/tool_call|>"])),
            Self::CommandR if opener == "<|START_ACTION|>" => {
                Box::new(JsonCalls::new(COHERE, true, false, &["<|END_ACTION|>"]))
            }
            Self::CommandR => Box::new(Nothing),
            Self::MistralArgs => Box::new(MistralArgs::new()),
            Self::Qwen3Coder => Box::new(QwenXml::new()),
            Self::DeepSeekR1 => Box::new(DeepSeek::new()),
        }
    }

    /// One call as the model writes it.
    pub fn write_call(self, name: &str, arguments: &Value) -> String {
        let n = serde_json::to_string(name).expect("a string serialises");
        let body = |args_key: &str| format!("{{\"name\": {n}, \"{args_key}\": {arguments}}}");
        match self {
            Self::Hermes => format!("<tool_call>\n{}\n</tool_call>", body("arguments")),
            Self::Llama3 => body("parameters"),
            Self::Mistral => format!("[TOOL_CALLS][{}]", body("arguments")),
            Self::MistralArgs => format!("[TOOL_CALLS]{name}[ARGS]{arguments}"),
            Self::Granite => format!("<|tool_call|>[{}]", body("arguments")),
            Self::DeepSeekR1 => format!(
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n\
                 ```json\n{arguments}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
            ),
            Self::CommandR => format!(
                "<|START_ACTION|>[\n    {{\"tool_call_id\": \"0\", \"tool_name\": {n}, \
                 \"parameters\": {arguments}}}\n]<|END_ACTION|>"
            ),
            Self::Qwen3Coder => {
                let mut s = format!("<tool_call>\n<function={name}>\n");
                for (k, v) in arguments.as_object().into_iter().flatten() {
                    let v = match v {
                        Value::String(t) => t.clone(),
                        other => other.to_string(),
                    };
                    s.push_str(&format!("<parameter={k}>\n{v}\n</parameter>\n"));
                }
                s + "</function>\n</tool_call>"
            }
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
    /// Their parameter schemas (XML values are typed by them).
    pub params: HashMap<String, Value>,
    /// Keep every call, else only the first.
    pub parallel: bool,
}

impl CallReader {
    /// A reader of `format` for `tools`.
    pub fn new(format: ToolFormat, tools: &[Tool], parallel: bool) -> Self {
        Self {
            format,
            names: tools.iter().map(|t| t.function.name.clone()).collect(),
            params: tools
                .iter()
                .filter_map(|t| Some((t.function.name.clone(), t.function.parameters.clone()?)))
                .collect(),
            parallel,
        }
    }

    /// The content and the calls of a whole answer (as its stream gives them).
    pub fn read(&self, text: &str) -> Parsed {
        let mut s = self.stream();
        let mut parts = vec![s.push(text), s.finish()];
        let mut p = Parsed::default();
        for piece in parts.drain(..) {
            p.content.push_str(&piece.content);
            for d in piece.calls {
                if d.name.is_some() {
                    p.calls.push(parse::ParsedCall {
                        name: d.name.unwrap_or_default(),
                        arguments: String::new(),
                        id: None,
                    });
                }
                if let Some(c) = p.calls.last_mut() {
                    c.arguments.push_str(&d.arguments);
                    if d.id.is_some() {
                        c.id = d.id;
                    }
                }
            }
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
    let example = format.write_call(
        "<function-name>",
        &serde_json::json!({"<argument>": "<value>"}),
    );
    s.push_str(&example);
    s.push_str("\n\nThe functions:\n");
    for t in template_tools(tools) {
        s.push_str(&t.to_string());
        s.push('\n');
    }
    s
}
