//! The grammar of a required call (`tool_choice: required` or a named function): the
//! answer is one call (or several, with `parallel_tool_calls`) in the model's own format,
//! to one of the tools, with arguments valid against the tool's schema.

use serde_json::{Value, json};
use sluice_engine::{GrammarSpec, json_layout};

use super::ToolFormat;
use crate::api::tools::Tool;

/// A tool's parameter schema (an object with anything when it gives none). Properties
/// the schema does not name are not written unless it allows them itself: a small model
/// otherwise copies schema keywords (`maxLength`, `required`) into its arguments.
fn params(t: &Tool) -> Value {
    let mut p = t
        .function
        .parameters
        .clone()
        .unwrap_or_else(|| json!({"type": "object"}));
    if let Some(o) = p.as_object_mut()
        && o.contains_key("properties")
    {
        o.entry("additionalProperties")
            .or_insert(Value::Bool(false));
    }
    p
}

/// `%json` of a schema, in the compact layout constrained output uses.
fn json(schema: Value) -> String {
    format!("%json {}", json_layout(schema))
}

/// A Lark string literal.
fn lit(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The JSON call object of `t` with the family's keys.
fn call_object(t: &Tool, name_key: &str, args_key: &str, id_key: Option<&str>) -> Value {
    let mut props = serde_json::Map::new();
    let mut required = Vec::new();
    if let Some(id) = id_key {
        props.insert(
            id.into(),
            json!({"type": "string", "pattern": "^[0-9]{1,3}$"}),
        );
        required.push(id.to_string());
    }
    props.insert(name_key.into(), json!({"const": t.function.name}));
    props.insert(args_key.into(), params(t));
    required.extend([name_key.to_string(), args_key.to_string()]);
    json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

/// Qwen3-Coder's `<function=…>` body of `t`: its parameters in schema order, the
/// required ones always, values as the template writes them (strings as text).
fn xml_function(t: &Tool, i: usize, rules: &mut Vec<String>) -> String {
    let schema = params(t);
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut body = format!("{} ", lit(&format!("<function={}>\n", t.function.name)));
    for (j, (p, s)) in schema["properties"]
        .as_object()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let open = lit(&format!("<parameter={p}>\n"));
        let value = format!("v{i}_{j}");
        let text_only = match &s["type"] {
            Value::String(t) => t == "string",
            _ => s.get("enum").is_some() && s.get("type").is_none(),
        };
        if text_only {
            // Text without `<`, then the closing tag, as one lexeme: the value cannot end
            // early. `maxLength` (up to 256) bounds it.
            let most = s["maxLength"].as_u64().filter(|&n| n <= 256);
            let reps = most.map_or("*".to_string(), |n| format!("{{0,{n}}}"));
            rules.push(format!("{value}: /[^<]{reps}\\n<\\/parameter>/"));
        } else {
            rules.push(format!("{value}: {} \"\\n</parameter>\"", json(s.clone())));
        }
        let item = format!("{open} {value} \"\\n\"");
        if required.contains(&p.as_str()) {
            body.push_str(&format!("{item} "));
        } else {
            body.push_str(&format!("({item})? "));
        }
    }
    body + "\"</function>\""
}

/// The grammar of the output when a call is required: one call (or several, if
/// `parallel`) to one of `tools`, in `format`. `mark` writes a marker: as its control
/// token where the vocabulary has one (as the model writes it), else as text.
pub fn call_grammar(
    tools: &[&Tool],
    format: ToolFormat,
    parallel: bool,
    mark: &dyn Fn(&str) -> String,
) -> GrammarSpec {
    let any = |f: &dyn Fn(&Tool) -> Value| -> String {
        match tools {
            [one] => json(f(one)),
            many => json(json!({"anyOf": many.iter().map(|t| f(t)).collect::<Vec<_>>()})),
        }
    };
    let repeat = |one: &str, sep: &str| {
        if parallel {
            format!("{one} ({sep} {one})*")
        } else {
            one.to_string()
        }
    };
    let plain = |args: &'static str| any(&move |t: &Tool| call_object(t, "name", args, None));
    let mut rules = Vec::new();
    let start = match format {
        ToolFormat::Hermes => {
            rules.push(format!("call: {}", plain("arguments")));
            let one = format!(
                "{} \"\\n\" call \"\\n\" {}",
                mark("<tool_call>"),
                mark("</tool_call>")
            );
            rules.push(format!("one: {one}"));
            repeat("one", "\"\\n\"")
        }
        ToolFormat::Llama3 => {
            rules.push(format!("call: {}", plain("parameters")));
            repeat("call", "\"; \"")
        }
        ToolFormat::Mistral => {
            rules.push(format!("call: {}", plain("arguments")));
            format!(
                "{} \"[\" {} \"]\"",
                mark("[TOOL_CALLS]"),
                repeat("call", "\", \"")
            )
        }
        ToolFormat::Granite => {
            rules.push(format!("call: {}", plain("arguments")));
            format!(
                "{} \"[\" {} \"]\"",
                mark("<|tool_call|>"),
                repeat("call", "\", \"")
            )
        }
        ToolFormat::CommandR => {
            let c =
                any(&|t: &Tool| call_object(t, "tool_name", "parameters", Some("tool_call_id")));
            rules.push(format!("call: {c}"));
            format!(
                "{} \"[\\n    \" {} \"\\n]\" {}",
                mark("<|START_ACTION|>"),
                repeat("call", "\",\\n    \""),
                mark("<|END_ACTION|>")
            )
        }
        ToolFormat::MistralArgs => {
            let alts: Vec<String> = tools
                .iter()
                .map(|t| {
                    format!(
                        "{} {} {}",
                        lit(&t.function.name),
                        mark("[ARGS]"),
                        json(params(t))
                    )
                })
                .collect();
            rules.push(format!(
                "call: {} ({})",
                mark("[TOOL_CALLS]"),
                alts.join(" | ")
            ));
            repeat("call", "")
        }
        ToolFormat::DeepSeekR1 => {
            let alts: Vec<String> = tools
                .iter()
                .map(|t| {
                    format!(
                        "{} \"function\" {} {} {} \"\\n```\" {}",
                        mark("<｜tool▁call▁begin｜>"),
                        mark("<｜tool▁sep｜>"),
                        lit(&format!("{}\n```json\n", t.function.name)),
                        json(params(t)),
                        mark("<｜tool▁call▁end｜>")
                    )
                })
                .collect();
            rules.push(format!("call: {}", alts.join(" | ")));
            format!(
                "{} {} {}",
                mark("<｜tool▁calls▁begin｜>"),
                repeat("call", "\"\\n\""),
                mark("<｜tool▁calls▁end｜>")
            )
        }
        ToolFormat::Qwen3Coder => {
            let mut alts = Vec::new();
            for (i, t) in tools.iter().enumerate() {
                alts.push(xml_function(t, i, &mut rules));
            }
            rules.push(format!(
                "one: {} \"\\n\" ({}) \"\\n\" {}",
                mark("<tool_call>"),
                alts.join(" | "),
                mark("</tool_call>")
            ));
            repeat("one", "\"\\n\"")
        }
    };
    GrammarSpec::Lark(format!("start: {start}\n{}", rules.join("\n")))
}
