//! The browser pages, compiled into the binary: the chat page at `/` (its source is
//! `src/ui/`, plain ES modules with no build step) and the API docs at `/docs` (Swagger
//! UI's bundle, vendored in `src/ui/vendor/swagger-ui` by `scripts/vendor-swagger-ui`).
//! Nothing is fetched from another host, and a strict Content-Security-Policy forbids it
//! (and any inline script) in the browser too.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::ServerState;

/// No script but our own files, no connection but to this server, nothing inline.
const PAGE_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
    frame-ancestors 'none'";

/// Swagger UI sets some styles inline and shows SVG icons as data URLs.
const DOCS_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
    img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
    frame-ancestors 'none'";

const DOCS_HTML: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
"#;

/// `validatorUrl: null`: Swagger UI would otherwise send the spec to validator.swagger.io.
const DOCS_INIT: &str = r##"window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
});
"##;

/// One embedded file: its type, its bytes and the CSP it is served with (pages only).
fn asset(kind: &'static str, body: &'static [u8], csp: Option<&'static str>) -> Response {
    let mut r = (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response();
    if let Some(csp) = csp {
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(csp),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    r
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The chat page's routes (absent with `--no-ui`).
pub fn chat_routes() -> Router<ServerState> {
    macro_rules! file {
        ($kind:expr, $path:literal) => {
            get(|| async { asset($kind, include_bytes!($path), None) })
        };
    }
    Router::new()
        .route(
            "/",
            get(|| async { asset(HTML, include_bytes!("../ui/index.html"), Some(PAGE_CSP)) }),
        )
        .route("/ui/app.js", file!(JS, "../ui/app.js"))
        .route("/ui/markdown.js", file!(JS, "../ui/markdown.js"))
        .route("/ui/style.css", file!(CSS, "../ui/style.css"))
}

/// The API docs' routes.
pub fn docs_routes() -> Router<ServerState> {
    Router::new()
        .route(
            "/docs",
            get(|| async { asset(HTML, DOCS_HTML.as_bytes(), Some(DOCS_CSP)) }),
        )
        .route(
            "/docs/init.js",
            get(|| async { asset(JS, DOCS_INIT.as_bytes(), None) }),
        )
        .route(
            "/docs/swagger-ui-bundle.js",
            get(|| async {
                asset(
                    JS,
                    include_bytes!("../ui/vendor/swagger-ui/swagger-ui-bundle.js"),
                    None,
                )
            }),
        )
        .route(
            "/docs/swagger-ui.css",
            get(|| async {
                asset(
                    CSS,
                    include_bytes!("../ui/vendor/swagger-ui/swagger-ui.css"),
                    None,
                )
            }),
        )
}
