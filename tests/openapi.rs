//! The committed `openapi/openapi.json` is what the code generates, and the server serves
//! it with a docs page.

mod common;

#[test]
fn committed_spec_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json");
    let committed = std::fs::read_to_string(&path).expect("openapi/openapi.json exists");
    assert!(
        committed.trim_end() == sluice::http::openapi::json().trim_end(),
        "openapi/openapi.json is stale: run `sluice openapi > openapi/openapi.json`"
    );
}

#[tokio::test]
async fn spec_and_docs_are_served() {
    let base = common::server();
    let spec: serde_json::Value = reqwest::get(format!("{base}/openapi.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let generated: serde_json::Value =
        serde_json::from_str(&sluice::http::openapi::json()).unwrap();
    assert_eq!(spec, generated);
    for route in [
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/models",
        "/tokenize",
        "/health",
        "/ready",
        "/metrics",
    ] {
        assert!(
            spec["paths"].get(route).is_some(),
            "{route} missing from the spec"
        );
    }
    let docs = reqwest::get(format!("{base}/docs")).await.unwrap();
    assert_eq!(docs.status(), 200);
    assert!(
        docs.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = docs.text().await.unwrap();
    assert!(
        html.contains("/v1/chat/completions"),
        "the docs page embeds the spec"
    );
}
