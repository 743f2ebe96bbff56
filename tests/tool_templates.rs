//! A named tool call through each real chat template of `tests/data/templates.json`: the
//! default model served with the template (`--chat-template`), asked to call one function.
//! The template's family decides the call format; the grammar writes a call in it, and the
//! parser must read it back: `finish_reason: tool_calls`, the function named, arguments
//! valid against its schema, the same whole and streamed (greedy), and a streamed call's
//! arguments arriving in more than one delta.

mod common;

use serde_json::{Value, json};
use sluice::tools::ToolFormat;

fn templates() -> Vec<Value> {
    let p = common::data_dir().join("templates.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    d["templates"].as_array().unwrap().clone()
}

/// The format each template's family writes calls in.
fn expected(name: &str) -> ToolFormat {
    match name {
        "Qwen3-Coder" => ToolFormat::Qwen3Coder,
        n if n.contains("Llama-3") && !n.contains("Hermes") => ToolFormat::Llama3,
        n if n.contains("Mistral-Nemo") => ToolFormat::Mistral,
        n if n.contains("Mistral-Small-3.2") => ToolFormat::MistralArgs,
        n if n.contains("granite-3.3") => ToolFormat::Granite,
        n if n.contains("DeepSeek-R1") => ToolFormat::DeepSeekR1,
        n if n.contains("command-r7b") => ToolFormat::CommandR,
        _ => ToolFormat::Hermes,
    }
}

fn tools() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 12},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
            },
        },
    }, {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time now",
            "parameters": {"type": "object", "properties": {}},
        },
    }])
}

/// Arguments valid against `get_weather`'s schema.
fn valid(args: &str) -> Result<(), String> {
    let v: Value = serde_json::from_str(args).map_err(|e| format!("{args:?}: {e}"))?;
    let o = v.as_object().ok_or(format!("{args}: not an object"))?;
    let city = o["city"].as_str().ok_or(format!("{args}: city"))?;
    let days = o["days"].as_i64().ok_or(format!("{args}: days"))?;
    let keys_ok = o.keys().all(|k| k == "city" || k == "days");
    if city.chars().count() > 12 || !(1..=7).contains(&days) || !keys_ok {
        return Err(format!("{args}: outside the schema"));
    }
    Ok(())
}

fn request(stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": "What is the weather in Paris this week?"}],
        "tools": tools(),
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0,
        "max_tokens": 120,
        "stream": stream,
    })
}

/// The streamed call's name, its argument deltas, and the finish reason.
async fn streamed(base: &str) -> (String, Vec<String>, String) {
    let text = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&request(true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (mut name, mut deltas, mut reason) = (String::new(), Vec::new(), String::new());
    for chunk in common::sse::chunks(&text).0 {
        let choice = &chunk["choices"][0];
        for d in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert_eq!(d["index"], 0, "one call");
            if let Some(n) = d["function"]["name"].as_str() {
                name = n.to_string();
            }
            match d["function"]["arguments"].as_str() {
                Some(a) if !a.is_empty() => deltas.push(a.to_string()),
                _ => {}
            }
        }
        if let Some(r) = choice["finish_reason"].as_str() {
            reason = r.to_string();
        }
    }
    (name, deltas, reason)
}

#[tokio::test]
async fn a_named_call_through_every_real_template() {
    let mut failures = Vec::new();
    for t in templates() {
        let name = t["name"].as_str().unwrap();
        let source = t["source"].as_str().unwrap();
        assert_eq!(
            ToolFormat::of_template(Some(source)),
            expected(name),
            "{name}"
        );
        let file = common::scratch("tool-templates").join(format!("{name}.jinja"));
        std::fs::write(&file, source).unwrap();
        let s = common::Spawned::ready(
            &[
                "serve",
                "--chat-template",
                file.to_str().unwrap(),
                "--slots",
                "2",
            ],
            &[],
        )
        .await;
        let url = format!("{}/v1/chat/completions", s.base);
        let whole = common::post_json(&url, &request(false)).await;
        let choice = &whole["choices"][0];
        let call = &choice["message"]["tool_calls"][0]["function"];
        let args = call["arguments"].as_str().unwrap_or_default().to_string();
        if choice["finish_reason"] != "tool_calls" || call["name"] != "get_weather" {
            failures.push(format!("{name}: {whole}"));
            continue;
        }
        if let Err(e) = valid(&args) {
            failures.push(format!("{name}: {e}"));
        }
        let (sname, deltas, reason) = streamed(&s.base).await;
        if sname != "get_weather" || reason != "tool_calls" || deltas.concat() != args {
            failures.push(format!(
                "{name}: streamed {sname} {deltas:?} {reason}, whole {args}"
            ));
        }
        if deltas.len() < 2 {
            failures.push(format!(
                "{name}: the arguments came in one piece: {deltas:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
