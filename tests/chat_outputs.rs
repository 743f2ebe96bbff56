//! Real models' outputs with tool calls and thinking, as llama.cpp's own tests record
//! them (`tests/data/chat-outputs.json`: each case names its line in llama.cpp's
//! `tests/test-chat.cpp`), read by sluice's parsers: the thinking split out, the calls and
//! their arguments, the content around them, whole and streamed in pieces.

mod common;

use serde_json::{Value, json};
use sluice::api::tools::{FunctionDef, Tool};
use sluice::reasoning::{ReasoningFormat, ReasoningReader};
use sluice::tools::{CallReader, ToolFormat};

fn data() -> Value {
    let p = common::data_dir().join("chat-outputs.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("chat-outputs.json")).unwrap()
}

/// The tools a case offers, with their schemas from the file.
fn tools(d: &Value, case: &Value) -> Vec<Tool> {
    case["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|name| Tool {
            kind: "function".into(),
            function: FunctionDef {
                name: name.into(),
                description: None,
                parameters: d["tools"][name].get("parameters").cloned(),
                strict: None,
            },
        })
        .collect()
}

/// The tool format and thinking markers of a case's format id.
fn formats(case: &Value) -> (Option<ToolFormat>, ReasoningFormat) {
    let f = case["format"].as_str().unwrap();
    let thinking = match f {
        "command_r7b" => ReasoningFormat::CommandR,
        "mistral_args" => ReasoningFormat::Mistral,
        _ => ReasoningFormat::Think,
    };
    let tools = match f {
        "reasoning" => None,
        other => Some(ToolFormat::named(other).unwrap_or_else(|| panic!("format {other}"))),
    };
    (tools, thinking)
}

/// What sluice reads from `output` in pieces of `step` characters (0: whole).
fn read(case: &Value, d: &Value, step: usize) -> (String, String, Vec<Value>) {
    let output = case["output"].as_str().unwrap();
    let (format, thinking) = formats(case);
    let split_thinking = case["reasoning_format"] != "none";
    let reasoning = ReasoningReader {
        format: thinking,
        open: case["thinking_open"].as_bool().unwrap_or(false),
        interrupt: (format == Some(ToolFormat::Qwen3Coder)).then_some("<tool_call>"),
    };
    let reader = format.map(|f| CallReader::new(f, &tools(d, case), true));
    let chars: Vec<char> = output.chars().collect();
    let pieces: Vec<String> = if step == 0 {
        vec![output.to_string()]
    } else {
        chars.chunks(step).map(|c| c.iter().collect()).collect()
    };
    let (mut thought, mut content, mut calls) = (String::new(), String::new(), Vec::<Value>::new());
    let mut rs = reasoning.stream();
    let mut ts = reader.as_ref().map(CallReader::stream);
    // A partial output is a stream that has not ended: only what was sent so far counts.
    let partial = case["partial"].as_bool().unwrap_or(false);
    let mut take = |text: String, ts: &mut Option<sluice::tools::ToolStream>, last: bool| {
        let mut pieces = Vec::new();
        if let Some(t) = ts {
            pieces.push(t.push(&text));
            if last && !partial {
                pieces.push(t.finish());
            }
        } else {
            content.push_str(&text);
        }
        for p in pieces {
            content.push_str(&p.content);
            for c in p.calls {
                if let Some(name) = c.name {
                    calls.push(json!({"name": name, "arguments": ""}));
                }
                let last = calls.last_mut().expect("a call starts first");
                let args = format!("{}{}", last["arguments"].as_str().unwrap(), c.arguments);
                last["arguments"] = json!(args);
                if let Some(id) = c.id {
                    last["id"] = json!(id);
                }
            }
        }
    };
    for p in &pieces {
        if split_thinking {
            let s = rs.push(p);
            thought.push_str(&s.reasoning);
            take(s.content, &mut ts, false);
        } else {
            take(p.clone(), &mut ts, false);
        }
    }
    let rest = if split_thinking && !partial {
        rs.finish()
    } else {
        Default::default()
    };
    thought.push_str(&rest.reasoning);
    take(rest.content, &mut ts, true);
    (thought, content, calls)
}

#[test]
fn recorded_outputs_read_as_llama_cpp_reads_them() {
    let d = data();
    let cases = d["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for case in cases {
        let src = format!("{} ({})", case["source"].as_str().unwrap(), case["format"]);
        // llama.cpp's newer tests compare trimmed text; a partial output's content may
        // end in whitespace sluice holds until it knows whether a call follows.
        let trimmed = case["compare"] == "trimmed";
        let partial = case["partial"].as_bool().unwrap_or(false);
        let norm = |s: &str| match (trimmed, partial) {
            (true, _) => s.trim().to_string(),
            (false, true) => s.trim_end().to_string(),
            _ => s.to_string(),
        };
        let (thought, content, calls) = read(case, &d, 0);
        if norm(&thought) != norm(case["reasoning"].as_str().unwrap()) {
            failures.push(format!(
                "{src}: reasoning {thought:?}, want {}",
                case["reasoning"]
            ));
        }
        if norm(&content) != norm(case["content"].as_str().unwrap()) {
            failures.push(format!(
                "{src}: content {content:?}, want {}",
                case["content"]
            ));
        }
        let want = case["tool_calls"].as_array().unwrap();
        let got: Vec<Value> = calls
            .iter()
            .map(|c| {
                let args = serde_json::from_str(c["arguments"].as_str().unwrap())
                    .unwrap_or_else(|_| c["arguments"].clone());
                let mut v = json!({"name": c["name"], "arguments": args});
                if let Some(id) = c.get("id") {
                    v["id"] = id.clone();
                }
                v
            })
            .collect();
        let want: Vec<Value> = want
            .iter()
            .map(|w| {
                let mut v = json!({"name": w["name"], "arguments": w["arguments"]});
                if let Some(id) = w.get("id").filter(|i| i.as_str() != Some("")) {
                    v["id"] = id.clone();
                }
                v
            })
            .collect();
        if got != want {
            failures.push(format!("{src}: calls {got:?}, want {want:?}"));
        }
        let whole = (thought, content, calls);
        for step in [1, 3, 7] {
            if read(case, &d, step) != whole {
                failures.push(format!("{src}: in pieces of {step} differs from whole"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
