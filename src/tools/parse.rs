//! A whole answer's calls: what its stream gives, put together. Text that does not hold
//! well-formed calls is content, as vLLM's parsers keep it.

/// A call found in the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    /// The function.
    pub name: String,
    /// Its arguments' JSON text, as the model wrote it.
    pub arguments: String,
    /// The call's own id, where the family writes one (Mistral, Command R7B).
    pub id: Option<String>,
}

/// The text around the calls, and the calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Content outside the calls (whitespace next to the calls dropped).
    pub content: String,
    /// The calls, in order.
    pub calls: Vec<ParsedCall>,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::{CallReader, ToolFormat};
    use super::*;

    fn reader(format: ToolFormat, names: &[&str], parallel: bool) -> CallReader {
        CallReader {
            format,
            names: names.iter().map(|s| s.to_string()).collect(),
            params: Default::default(),
            parallel,
        }
    }

    fn parse(format: ToolFormat, text: &str) -> Parsed {
        reader(format, &[], true).read(text)
    }

    /// The calls as (name, arguments as JSON).
    fn calls(p: &Parsed) -> Vec<(String, Value)> {
        p.calls
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    serde_json::from_str(&c.arguments).unwrap_or(Value::Null),
                )
            })
            .collect()
    }

    fn call(name: &str, args: Value) -> (String, Value) {
        (name.to_string(), args)
    }

    /// Feeds `text` in pieces of `step` characters and puts the answer together.
    fn streamed(r: &CallReader, text: &str, step: usize) -> Parsed {
        let mut s = r.stream();
        let chars: Vec<char> = text.chars().collect();
        let mut pieces: Vec<_> = chars
            .chunks(step)
            .map(|c| s.push(&c.iter().collect::<String>()))
            .collect();
        pieces.push(s.finish());
        let mut p = Parsed::default();
        for piece in pieces {
            p.content.push_str(&piece.content);
            for d in piece.calls {
                if let Some(name) = d.name {
                    assert_eq!(d.index, p.calls.len(), "calls are numbered in order");
                    p.calls.push(ParsedCall {
                        name,
                        arguments: String::new(),
                        id: None,
                    });
                }
                let c = p
                    .calls
                    .last_mut()
                    .expect("a call starts before its arguments");
                c.arguments.push_str(&d.arguments);
                c.id = d.id.or(c.id.take());
            }
        }
        p
    }

    #[test]
    fn hermes_calls_between_content() {
        let t = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
                 {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \
                 \"arguments\": {}}\n</tool_call>";
        let p = parse(ToolFormat::Hermes, t);
        assert_eq!(p.content, "Let me check.");
        assert_eq!(
            calls(&p),
            vec![
                call("get_weather", json!({"city": "Paris"})),
                call("get_time", json!({}))
            ]
        );
    }

    #[test]
    fn string_arguments_are_decoded() {
        let t = "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>";
        assert_eq!(
            calls(&parse(ToolFormat::Hermes, t)),
            vec![call("f", json!({"x": 1}))]
        );
    }

    #[test]
    fn a_call_cut_before_its_arguments_is_content() {
        let t = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n\
                 <tool_call>\n{\"name\": \"f\", \"argu";
        let p = parse(ToolFormat::Hermes, t);
        assert_eq!(calls(&p), vec![call("f", json!({}))]);
        assert_eq!(p.content, "<tool_call>\n{\"name\": \"f\", \"argu");
    }

    #[test]
    fn a_call_cut_in_its_arguments_keeps_what_was_written() {
        let t = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"par";
        let p = parse(ToolFormat::Hermes, t);
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].arguments, "{\"q\": \"par");
        assert_eq!(p.content, "");
    }

    #[test]
    fn malformed_calls_are_content() {
        for (f, t) in [
            (
                ToolFormat::Hermes,
                "<tool_call>{\"arguments\": {}}</tool_call>",
            ),
            (ToolFormat::Hermes, "<tool_call>oops</tool_call>"),
            (ToolFormat::Llama3, "{\"name\": 3}"),
            (ToolFormat::Mistral, "[TOOL_CALLS] not json"),
            (ToolFormat::MistralArgs, "[TOOL_CALLS]two words[ARGS]{}"),
            (ToolFormat::DeepSeekR1, "<｜tool▁calls▁begin｜>nope"),
        ] {
            let p = parse(f, t);
            assert!(p.calls.is_empty(), "{t}");
            assert_eq!(p.content, t);
        }
    }

    #[test]
    fn calls_to_unknown_functions_and_plain_json_are_content() {
        let r = reader(ToolFormat::Llama3, &["get_weather"], true);
        let t = "{\"name\": \"Alice\", \"age\": 30}";
        assert!(r.read(t).calls.is_empty());
        assert_eq!(r.read(t).content, t);
        assert!(
            parse(ToolFormat::Llama3, t).calls.is_empty(),
            "no arguments key"
        );
        let r = reader(ToolFormat::Hermes, &["get_weather"], true);
        assert!(
            r.read("<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>")
                .calls
                .is_empty()
        );
    }

    #[test]
    fn plain_text_is_content_in_every_format() {
        for f in ToolFormat::ALL {
            let p = parse(f, "The weather is fine.\n\nTruly.");
            assert_eq!(p.content, "The weather is fine.\n\nTruly.", "{f:?}");
            assert!(p.calls.is_empty());
        }
    }

    #[test]
    fn written_calls_read_back_in_every_format_whole_and_streamed() {
        let args = json!({"q": "a \"quoted\" <word>\nnext", "n": [1, 2], "ok": true});
        for f in ToolFormat::ALL {
            let mut one = reader(f, &["search"], true);
            one.params.insert(
                "search".into(),
                json!({"properties": {"q": {"type": "string"}, "n": {"type": "array"},
                       "ok": {"type": "boolean"}}}),
            );
            let text = format!("Sure.\n{}", f.write_call("search", &args));
            let text = if f == ToolFormat::Llama3 {
                f.write_call("search", &args)
            } else {
                text
            };
            let whole = one.read(&text);
            assert_eq!(calls(&whole), vec![call("search", args.clone())], "{f:?}");
            for step in [1, 2, 3, 7, 1000] {
                assert_eq!(
                    streamed(&one, &text, step),
                    whole,
                    "{f:?} in pieces of {step}"
                );
            }
        }
    }

    #[test]
    fn only_the_first_call_without_parallel_calls() {
        let t = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\
                 <tool_call>{\"name\": \"b\", \"arguments\": {\"x\": 1}}</tool_call>";
        let p = reader(ToolFormat::Hermes, &[], false).read(t);
        assert_eq!(calls(&p), vec![call("a", json!({}))]);
        assert_eq!(p.content, "");
    }

    #[test]
    fn arguments_stream_as_they_are_written() {
        let r = reader(ToolFormat::Hermes, &[], true);
        let mut s = r.stream();
        let p = s.push("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"text\": \"one");
        assert_eq!(p.calls[0].name.as_deref(), Some("f"));
        assert_eq!(p.calls[0].arguments, "{\"text\": \"one");
        let p = s.push(" two");
        assert_eq!(p.calls[0].arguments, " two");
        assert_eq!(p.calls[0].name, None);
        let p = s.push("\"}}\n</tool_call>");
        assert_eq!(p.calls[0].arguments, "\"}");
    }

    #[test]
    fn content_is_not_held_longer_than_a_marker_could_need() {
        let mut s = reader(ToolFormat::Hermes, &[], true).stream();
        assert_eq!(s.push("Hello <").content, "Hello");
        assert_eq!(s.push("b>").content, " <b>");
    }

    #[test]
    fn llama3_json_semicolons_and_python_tag() {
        let t = "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \
                 \"parameters\": {\"k\": [1, 2]}}";
        assert_eq!(
            calls(&parse(ToolFormat::Llama3, t)),
            vec![call("a", json!({})), call("b", json!({"k": [1, 2]}))]
        );
    }

    #[test]
    fn mistral_list_with_ids() {
        let t = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}, \
                 \"id\": \"abc123def\"}, {\"name\": \"f\", \"arguments\": {}}]";
        let p = parse(ToolFormat::Mistral, t);
        assert_eq!(
            calls(&p),
            vec![
                call("get_weather", json!({"city": "Oslo"})),
                call("f", json!({}))
            ]
        );
        assert_eq!(p.calls[0].id.as_deref(), Some("abc123def"));
    }
}
