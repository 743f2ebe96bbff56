//! Request limits are checked in one place, validation, against the flags: a chat request
//! without `max_tokens` on a server started with `--max-new-tokens 16` gets at most 16
//! tokens (never a refusal for a field the client did not send); an explicit value above
//! the limit is refused with the field named.

mod common;

use serde_json::json;

fn url() -> String {
    common::server_with(|c| {
        c.max_new_tokens = 16;
        c.max_prompt_tokens = 200;
    })
    .to_string()
}

#[tokio::test]
async fn a_chat_request_without_max_tokens_gets_the_servers_default() {
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", url()))
        .json(&json!({"messages": [{"role": "user", "content": "Write a long poem about the sea."}], "ignore_eos": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 16, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn explicit_values_above_the_limits_are_refused_by_name() {
    let post = |body: serde_json::Value| async move {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/completions", url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<serde_json::Value>().await.unwrap(),
        )
    };
    let (s, v) = post(json!({"prompt": "Hi", "max_tokens": 17})).await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "max_tokens");
    assert_eq!(v["error"]["code"], "limit_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("16"));
    let (s, v) = post(json!({"prompt": "word ".repeat(300), "max_tokens": 1})).await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "prompt");
    let (s, v) = post(json!({"prompt": "Hi", "max_tokens": 16})).await;
    assert_eq!(s, 200, "{v}");
}
