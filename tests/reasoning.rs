//! A reasoning model's thinking, served: the default model with DeepSeek R1's real chat
//! template (its generation prompt opens `<think>` when `enable_thinking` is on). The
//! thinking comes out as `reasoning_content` (chat), a reasoning item (Responses) and a
//! thinking block (Messages), whole and streamed alike; the budget forces the end marker;
//! a grammar or a named tool call applies to the answer after the thinking; usage and
//! `/metrics` count the thinking tokens; bad fields get 400s.

mod common;

use serde_json::{Value, json};

async fn server() -> common::Spawned {
    let p = common::data_dir().join("templates.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let t = d["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
        .expect("the R1 template");
    let file = common::scratch("reasoning").join("r1.jinja");
    std::fs::write(&file, t["source"].as_str().unwrap()).unwrap();
    common::Spawned::ready(
        &[
            "serve",
            "--chat-template",
            file.to_str().unwrap(),
            "--slots",
            "4",
        ],
        &[],
    )
    .await
}

fn chat(extra: Value) -> Value {
    let mut r = json!({
        "messages": [{"role": "user", "content": "Is 17 a prime number?"}],
        "temperature": 0,
        "max_tokens": 48,
        "reasoning_effort": "high",
    });
    for (k, v) in extra.as_object().unwrap() {
        r[k] = v.clone();
    }
    r
}

fn reasoning_tokens(resp: &Value) -> u64 {
    resp["usage"]["completion_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap_or(0)
}

/// The SSE `data:` payloads of a streamed request.
async fn events(url: &str, body: &Value) -> Vec<Value> {
    let text = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    common::sse::chunks(&text).0
}

fn no_markers(s: &str) {
    assert!(!s.contains("<think>") && !s.contains("</think>"), "{s:?}");
}

#[tokio::test]
async fn thinking_is_split_out_budgeted_and_counted() {
    let s = server().await;
    let models = common::get_json(&format!("{}/v1/models", s.base)).await;
    assert_eq!(
        models["data"][0]["capabilities"],
        json!(["completion", "chat", "tools", "reasoning"])
    );
    let url = format!("{}/v1/chat/completions", s.base);
    // The closing marker's length in this vocabulary.
    let tok = common::post_json(
        &format!("{}/tokenize", s.base),
        &json!({"prompt": "</think>"}),
    )
    .await;
    let end_len = tok["count"].as_u64().unwrap();

    let free = common::post_json(&url, &chat(json!({}))).await;
    let free_thought = free["choices"][0]["message"]["reasoning_content"]
        .as_str()
        .unwrap();
    assert!(!free_thought.is_empty(), "{free}");
    no_markers(free_thought);
    let free_n = reasoning_tokens(&free);
    assert!(
        free_n > 8 + end_len,
        "the model thinks past 8 tokens unbudgeted: {free}"
    );

    let before = common::metric(&s.base, "sluice_reasoning_tokens_total", &[]).await;
    let budgeted = common::post_json(&url, &chat(json!({"thinking_token_budget": 8}))).await;
    let after = common::metric(&s.base, "sluice_reasoning_tokens_total", &[]).await;
    let msg = &budgeted["choices"][0]["message"];
    assert_eq!(reasoning_tokens(&budgeted), 8 + end_len, "{budgeted}");
    assert_eq!(after - before, (8 + end_len) as f64);
    let thought = msg["reasoning_content"].as_str().unwrap();
    let content = msg["content"].as_str().unwrap();
    assert!(!thought.is_empty() && !content.is_empty(), "{budgeted}");
    no_markers(thought);
    no_markers(content);

    // Streamed: the same thinking and answer, in deltas.
    let chunks = events(
        &url,
        &chat(json!({"thinking_token_budget": 8, "stream": true})),
    )
    .await;
    let (mut st, mut sc) = (String::new(), String::new());
    for c in &chunks {
        let d = &c["choices"][0]["delta"];
        st.push_str(d["reasoning_content"].as_str().unwrap_or(""));
        sc.push_str(d["content"].as_str().unwrap_or(""));
    }
    assert_eq!((st.as_str(), sc.as_str()), (thought, content));

    // Thinking off (the template's default): no thinking, no count.
    let off = common::post_json(&url, &chat(json!({"reasoning_effort": "none"}))).await;
    assert!(
        off["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{off}"
    );
    assert!(
        off["usage"].get("completion_tokens_details").is_none(),
        "{off}"
    );
}

#[tokio::test]
async fn grammars_and_named_calls_apply_after_the_thinking() {
    let s = server().await;
    let url = format!("{}/v1/chat/completions", s.base);
    let schema = json!({
        "type": "object",
        "properties": {"prime": {"type": "boolean"}},
        "required": ["prime"],
        "additionalProperties": false,
    });
    let format = json!({"type": "json_schema", "json_schema": {"name": "a", "schema": schema}});
    let r = common::post_json(
        &url,
        &chat(json!({"thinking_token_budget": 6, "response_format": format})),
    )
    .await;
    let msg = &r["choices"][0]["message"];
    assert!(
        !msg["reasoning_content"].as_str().unwrap().is_empty(),
        "{r}"
    );
    let answer: Value = serde_json::from_str(msg["content"].as_str().unwrap()).expect("JSON");
    assert!(answer["prime"].is_boolean(), "{r}");

    let tools = json!([{"type": "function", "function": {"name": "check", "description": "Checks",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                       "required": ["n"]}}}]);
    let choice = json!({"type": "function", "function": {"name": "check"}});
    let r = common::post_json(
        &url,
        // DeepSeek's call markers take many tokens in this vocabulary.
        &chat(
            json!({"thinking_token_budget": 4, "tools": tools, "tool_choice": choice,
                     "max_tokens": 200}),
        ),
    )
    .await;
    let c = &r["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{r}");
    assert!(
        !c["message"]["reasoning_content"]
            .as_str()
            .unwrap()
            .is_empty()
    );
    let args: Value = serde_json::from_str(
        c["message"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(args["n"].is_i64(), "{r}");
}

#[tokio::test]
async fn messages_and_responses_carry_the_thinking() {
    let s = server().await;
    let m = json!({
        "messages": [{"role": "user", "content": "Is 17 a prime number?"}],
        "max_tokens": 40,
        "temperature": 0,
        "thinking": {"type": "enabled", "budget_tokens": 6},
    });
    let url = format!("{}/v1/messages", s.base);
    let r = common::post_json(&url, &m).await;
    assert_eq!(r["content"][0]["type"], "thinking", "{r}");
    let thought = r["content"][0]["thinking"].as_str().unwrap();
    no_markers(thought);
    assert_eq!(r["content"][1]["type"], "text", "{r}");

    let mut sm = m.clone();
    sm["stream"] = json!(true);
    let evs = events(&url, &sm).await;
    let streamed: String = evs
        .iter()
        .filter(|e| e["delta"]["type"] == "thinking_delta")
        .map(|e| e["delta"]["thinking"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, thought);
    let starts: Vec<&Value> = evs
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .map(|e| &e["content_block"]["type"])
        .collect();
    assert_eq!(
        starts.first().map(|v| v.as_str()),
        Some(Some("thinking")),
        "{evs:?}"
    );

    for bad in [
        json!({"type": "sometimes"}),
        json!({"type": "enabled", "budget_tokens": 40}),
    ] {
        let mut b = m.clone();
        b["thinking"] = bad;
        let resp = reqwest::Client::new()
            .post(&url)
            .json(&b)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
    }

    let url = format!("{}/v1/responses", s.base);
    let body = json!({"input": "Is 17 a prime number?", "max_output_tokens": 40,
                      "temperature": 0, "reasoning": {"effort": "high"}});
    let r = common::post_json(&url, &body).await;
    assert_eq!(r["output"][0]["type"], "reasoning", "{r}");
    let text = r["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let n = r["usage"]["output_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap();
    assert!(n > 0, "{r}");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let evs = events(&url, &sb).await;
    let streamed: String = evs
        .iter()
        .filter(|e| e["type"] == "response.reasoning_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, text);
}

#[tokio::test]
async fn bad_reasoning_fields_are_refused() {
    let s = server().await;
    let url = format!("{}/v1/chat/completions", s.base);
    for extra in [
        json!({"thinking_token_budget": -1}),
        json!({"reasoning_effort": "extreme"}),
    ] {
        let resp = reqwest::Client::new()
            .post(&url)
            .json(&chat(extra))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    }
}
