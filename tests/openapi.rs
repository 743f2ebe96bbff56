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
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
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
    // The docs page and everything it loads come from this server.
    let html = asset(base, "/docs", "text/html").await;
    assert!(html.contains("/docs/swagger-ui-bundle.js") && html.contains("/docs/init.js"));
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(
        asset(base, "/docs/init.js", "text/javascript")
            .await
            .contains("/openapi.json")
    );
    asset(base, "/docs/swagger-ui-bundle.js", "text/javascript").await;
    asset(base, "/docs/swagger-ui.css", "text/css").await;
}

/// GETs an embedded file: 200, the content type, nosniff; returns the body.
async fn asset(base: &str, path: &str, kind: &str) -> String {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    let h = r.headers();
    assert!(
        h["content-type"].to_str().unwrap().starts_with(kind),
        "{path}: {:?}",
        h["content-type"]
    );
    assert_eq!(h["x-content-type-options"], "nosniff");
    if kind == "text/html" {
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("connect-src 'self'"));
    }
    r.text().await.unwrap()
}

#[tokio::test]
async fn the_chat_page_is_served_from_the_binary_and_only_there() {
    let base = common::server();
    let html = asset(base, "/", "text/html").await;
    for path in ["/ui/app.js", "/ui/style.css"] {
        assert!(html.contains(path), "the page loads {path}");
    }
    // Nothing is loaded from another host.
    for needle in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "href=\"//",
        "@import",
    ] {
        assert!(
            !html.contains(needle),
            "the page refers elsewhere: {needle}"
        );
    }
    let app = asset(base, "/ui/app.js", "text/javascript").await;
    assert!(app.contains("markdown.js") && app.contains("/v1/chat/completions"));
    asset(base, "/ui/markdown.js", "text/javascript").await;
    asset(base, "/ui/style.css", "text/css").await;
    // With --no-ui, there is no page (and the docs stay).
    let off = common::Spawned::ready(
        &["serve", "--no-ui", "--slots", "2", "--context", "256"],
        &[],
    )
    .await;
    assert_eq!(
        reqwest::get(format!("{}/", off.base))
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        reqwest::get(format!("{}/ui/app.js", off.base))
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        reqwest::get(format!("{}/docs", off.base))
            .await
            .unwrap()
            .status(),
        200
    );
}
