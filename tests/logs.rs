//! Logs: `--log-format json` gives one JSON object per line; every line of a request
//! carries its `x-request-id` (taken from the request or generated and returned), and each
//! generation request ends with one summary line.

mod common;

use serde_json::{Value, json};

#[tokio::test]
async fn json_logs_carry_the_request_id_and_one_summary_per_request() {
    let server = common::Spawned::ready(
        &[
            "serve",
            "--slots",
            "2",
            "--context",
            "256",
            "--log-format",
            "json",
        ],
        &[],
    )
    .await;
    let base = server.base.clone();
    let client = reqwest::Client::new();
    let send = |id: Option<&str>, path: &str, body: Value| {
        let mut r = client.post(format!("{base}{path}")).json(&body);
        if let Some(id) = id {
            r = r.header("x-request-id", id);
        }
        r.send()
    };
    let r = send(
        Some("req-one"),
        "/v1/completions",
        json!({"prompt": "Hello", "max_tokens": 4, "ignore_eos": true}),
    )
    .await
    .unwrap();
    assert_eq!(r.headers()["x-request-id"], "req-one");
    r.text().await.unwrap();
    let r = send(Some("req-two"), "/v1/chat/completions", json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": true, "ignore_eos": true})).await.unwrap();
    r.text().await.unwrap();
    let r = send(
        Some("req-three"),
        "/v1/completions",
        json!({"prompt": "x", "temperature": 9}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    let r = send(
        None,
        "/v1/completions",
        json!({"prompt": "x", "max_tokens": 1}),
    )
    .await
    .unwrap();
    let generated = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(generated.len(), 32, "{generated}");
    r.text().await.unwrap();
    // Stop the server (SIGTERM: it logs its last lines and exits) and read its log.
    let mut server = server;
    server.terminate();
    assert!(server.wait().success());
    let err = server.log().join("\n");

    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not a JSON log line: {l}")))
        .collect();
    let of = |id: &str| -> Vec<&Value> { lines.iter().filter(|l| l["span"]["id"] == id).collect() };
    let summary = |id: &str| -> Vec<&Value> {
        of(id)
            .into_iter()
            .filter(|l| l["fields"]["message"] == "request finished")
            .collect()
    };
    let one = summary("req-one");
    assert_eq!(one.len(), 1, "{err}");
    let f = &one[0]["fields"];
    assert_eq!(f["status"], 200);
    assert_eq!(f["completion_tokens"], 4);
    assert_eq!(f["finish_reason"], "length");
    assert!(f["prompt_tokens"].as_u64().unwrap() >= 1);
    assert!(f["queue_ms"].as_f64().unwrap() >= 0.0 && f["ttft_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(
        summary("req-two").len(),
        1,
        "the streamed request logs its summary too"
    );
    assert_eq!(summary("req-two")[0]["fields"]["completion_tokens"], 3);
    let three = of("req-three");
    assert!(three.iter().any(|l| l["fields"]["status"] == 400), "{err}");
    assert_eq!(summary(&generated).len(), 1);
}
