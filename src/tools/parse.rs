//! Reads tool calls out of a model's text in each family's format. A text that does not
//! hold well-formed calls is returned as content, as vLLM's parsers do.

use serde_json::Value;

use super::ToolFormat;

/// A call found in the output.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedCall {
    /// The function.
    pub name: String,
    /// Its arguments as compact JSON.
    pub arguments: String,
}

/// The text around the calls, and the calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// Content outside the calls (trimmed; empty if there is none).
    pub content: String,
    /// The calls, in order.
    pub calls: Vec<ParsedCall>,
}

pub(super) const HERMES_OPEN: &str = "<tool_call>";
pub(super) const HERMES_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const MISTRAL_TAG: &str = "[TOOL_CALLS]";

/// One call object (`{"name": ..., "arguments"|"parameters": {...}}`) to one of `names`
/// (any name when `names` is empty).
pub(super) fn call_of(v: &Value, names: &[String]) -> Option<ParsedCall> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?.to_string();
    if !names.is_empty() && !names.contains(&name) {
        return None;
    }
    let args = o.get("arguments").or_else(|| o.get("parameters"))?.clone();
    // Some models write the arguments as a JSON string.
    let args = match args {
        Value::String(s) => serde_json::from_str(&s).ok()?,
        other => other,
    };
    args.is_object().then(|| ParsedCall {
        name,
        arguments: args.to_string(),
    })
}

/// The body of one Hermes call.
pub(super) fn hermes_call(body: &str, names: &[String]) -> Option<ParsedCall> {
    call_of(&serde_json::from_str(body.trim()).ok()?, names)
}

/// Calls in `text` written in `format`, to the functions `names` (a call to another name
/// is not a call).
pub fn parse(format: ToolFormat, text: &str, names: &[String]) -> Parsed {
    let plain = || Parsed {
        content: text.to_string(),
        calls: Vec::new(),
    };
    match format {
        ToolFormat::Hermes => {
            let mut rest = text;
            let mut content = String::new();
            let mut calls = Vec::new();
            while let Some(at) = rest.find(HERMES_OPEN) {
                content.push_str(&rest[..at]);
                let after = &rest[at + HERMES_OPEN.len()..];
                let (body, next, closed) = match after.find(HERMES_CLOSE) {
                    Some(end) => (&after[..end], &after[end + HERMES_CLOSE.len()..], true),
                    None => (after, "", false),
                };
                match hermes_call(body, names) {
                    Some(c) => calls.push(c),
                    // A malformed call, or a last one cut short (by `max_tokens`), stays
                    // text; the well-formed ones are kept.
                    None if closed => {
                        content.push_str(&format!("{HERMES_OPEN}{body}{HERMES_CLOSE}"))
                    }
                    None => {
                        content.push_str(&rest[at..]);
                        rest = "";
                        break;
                    }
                }
                rest = next;
            }
            content.push_str(rest);
            Parsed {
                content: if calls.is_empty() {
                    content
                } else {
                    content.trim().to_string()
                },
                calls,
            }
        }
        ToolFormat::Llama3 => {
            let t = text.trim_start();
            let t = t.strip_prefix(PYTHON_TAG).unwrap_or(t).trim();
            if !t.starts_with('{') {
                return plain();
            }
            let mut calls = Vec::new();
            let mut rest = t;
            while !rest.is_empty() {
                let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
                match values
                    .next()
                    .and_then(|v| v.ok())
                    .and_then(|v| call_of(&v, names))
                {
                    Some(c) => calls.push(c),
                    None => return plain(),
                }
                rest = rest[values.byte_offset()..].trim_start();
                rest = rest.strip_prefix(';').unwrap_or(rest).trim_start();
            }
            Parsed {
                content: String::new(),
                calls,
            }
        }
        ToolFormat::Mistral => {
            let Some(at) = text.find(MISTRAL_TAG) else {
                return plain();
            };
            let list: Option<Vec<ParsedCall>> =
                serde_json::from_str::<Value>(text[at + MISTRAL_TAG.len()..].trim())
                    .ok()
                    .and_then(|v| {
                        v.as_array()
                            .map(|a| a.iter().map(|c| call_of(c, names)).collect())
                    })
                    .flatten();
            match list {
                Some(calls) if !calls.is_empty() => Parsed {
                    content: text[..at].trim().to_string(),
                    calls,
                },
                _ => plain(),
            }
        }
    }
}

/// The marker that starts a call in `format` when it may follow content (Hermes,
/// Mistral); Llama 3 calls are the whole answer.
pub(super) fn opener(format: ToolFormat) -> &'static str {
    match format {
        ToolFormat::Hermes => HERMES_OPEN,
        ToolFormat::Llama3 => PYTHON_TAG,
        ToolFormat::Mistral => MISTRAL_TAG,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ParsedCall {
        ParsedCall {
            name: name.into(),
            arguments: args.into(),
        }
    }

    // Texts as the families' models write them (Qwen 2.5, Hermes 2 Pro, Llama 3.1,
    // Mistral 7B v0.3 model cards and chat templates).
    #[test]
    fn hermes_calls_between_content() {
        let t = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                 {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \
                 \"arguments\": {}}\n</tool_call>";
        let p = parse(ToolFormat::Hermes, t, &[]);
        assert_eq!(p.content, "Let me check.");
        assert_eq!(
            p.calls,
            vec![
                call("get_weather", r#"{"city":"Paris"}"#),
                call("get_time", "{}")
            ]
        );
    }

    #[test]
    fn hermes_unclosed_last_call_and_string_arguments() {
        let t = "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}";
        assert_eq!(
            parse(ToolFormat::Hermes, t, &[]).calls,
            vec![call("f", r#"{"x":1}"#)]
        );
    }

    #[test]
    fn a_cut_short_last_call_is_content_after_the_complete_ones() {
        let t = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\
                 <tool_call>\n{\"name\": \"f\", \"argu";
        let p = parse(ToolFormat::Hermes, t, &[]);
        assert_eq!(p.calls, vec![call("f", "{}")]);
        assert_eq!(p.content, "<tool_call>\n{\"name\": \"f\", \"argu");
    }

    #[test]
    fn malformed_calls_are_content() {
        for (f, t) in [
            (ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"argu"),
            (
                ToolFormat::Hermes,
                "<tool_call>{\"arguments\": {}}</tool_call>",
            ),
            (ToolFormat::Llama3, "{\"name\": 3}"),
            (ToolFormat::Mistral, "[TOOL_CALLS] not json"),
        ] {
            let p = parse(f, t, &[]);
            assert!(p.calls.is_empty(), "{t}");
            assert_eq!(p.content, t);
        }
    }

    #[test]
    fn calls_to_unknown_functions_and_plain_json_are_content() {
        let names = vec!["get_weather".to_string()];
        let t = "{\"name\": \"Alice\", \"age\": 30}";
        assert!(parse(ToolFormat::Llama3, t, &names).calls.is_empty());
        assert!(
            parse(ToolFormat::Llama3, t, &[]).calls.is_empty(),
            "no arguments key"
        );
        let t = "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>";
        assert!(parse(ToolFormat::Hermes, t, &names).calls.is_empty());
    }

    #[test]
    fn a_malformed_call_between_good_ones_is_content() {
        let t = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n\
                 <tool_call>oops</tool_call>";
        let p = parse(ToolFormat::Hermes, t, &[]);
        assert_eq!(p.calls, vec![call("a", "{}")]);
        assert_eq!(p.content, "<tool_call>oops</tool_call>");
    }

    #[test]
    fn plain_text_is_content() {
        for f in [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral] {
            let p = parse(f, "The weather is fine.", &[]);
            assert_eq!(p.content, "The weather is fine.");
            assert!(p.calls.is_empty());
        }
    }

    #[test]
    fn llama3_json_and_python_tag() {
        let t = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}";
        assert_eq!(
            parse(ToolFormat::Llama3, t, &[]).calls,
            vec![call("get_weather", r#"{"city":"Rome"}"#)]
        );
        let t = "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \
                 \"parameters\": {\"k\": [1, 2]}}";
        assert_eq!(
            parse(ToolFormat::Llama3, t, &[]).calls,
            vec![call("a", "{}"), call("b", r#"{"k":[1,2]}"#)]
        );
    }

    #[test]
    fn mistral_list() {
        let t = "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \
                 \"Oslo\"}}, {\"name\": \"f\", \"arguments\": {}}]";
        assert_eq!(
            parse(ToolFormat::Mistral, t, &[]).calls,
            vec![call("get_weather", r#"{"city":"Oslo"}"#), call("f", "{}")]
        );
    }

    #[test]
    fn written_calls_parse_back() {
        let args = serde_json::json!({"q": "a \"quoted\" word", "n": [1, 2]});
        for f in [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral] {
            let p = parse(f, &f.write_call("search", &args), &[]);
            assert_eq!(p.calls, vec![call("search", &args.to_string())], "{f:?}");
        }
    }
}
