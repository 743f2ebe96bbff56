//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use sluice::engine::model::{GgufFile, Model};
use sluice::tokenizer::Tokenizer;

/// The default model, fetched by `scripts/fetch-model` (the test command runs it first).
pub fn model_path() -> PathBuf {
    std::env::var_os("SLUICE_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(sluice::config::default_model_path)
}

/// `../shared` beside the repository, or `$SLUICE_SHARED`.
pub fn shared_dir() -> PathBuf {
    std::env::var_os("SLUICE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"))
}

/// The golden reference file for the default model.
pub fn reference() -> serde_json::Value {
    let p = shared_dir().join("reference/smollm2-q4_1.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).expect("reference json parses")
}

/// The default model and its tokenizer.
pub fn load() -> (Model, Tokenizer) {
    let p = model_path();
    let file = GgufFile::open(&p)
        .unwrap_or_else(|e| panic!("{e}: run scripts/fetch-model before the tests"));
    let model = Model::from_file(&file).expect("model loads");
    let tok = Tokenizer::from_gguf(&file, None).expect("tokenizer builds");
    (model, tok)
}

/// Token ids of a JSON array.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("array of ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

static ENGINE: std::sync::OnceLock<sluice::engine::EngineHandle> = std::sync::OnceLock::new();

/// The engine behind the test server (to watch its slots).
pub fn engine() -> &'static sluice::engine::EngineHandle {
    server();
    ENGINE.get().expect("server started")
}

/// A real sluice server on 127.0.0.1 with the real model, started once per test binary
/// on its own thread and runtime. Returns its base URL.
pub fn server() -> &'static str {
    server_with(|_| {})
}

/// Like `server`, with configuration changes (applied only by the first caller).
pub fn server_with(tweak: impl FnOnce(&mut sluice::config::ServeConfig)) -> &'static str {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let mut cfg = serve_config();
        tweak(&mut cfg);
        let state = sluice::start(&cfg).expect("server state");
        let _ = ENGINE.set(state.engine.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let body_limit = cfg.max_body_bytes;
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                tx.send(listener.local_addr().expect("addr"))
                    .expect("send addr");
                sluice::run(listener, state, body_limit, std::future::pending())
                    .await
                    .expect("serve");
            });
        });
        format!("http://{}", rx.recv().expect("server address"))
    })
}

/// The serve configuration tests start from: the default model, small limits.
pub fn serve_config() -> sluice::config::ServeConfig {
    use clap::Parser;
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        cfg: sluice::config::ServeConfig,
    }
    let mut cfg = Wrap::parse_from(["sluice"]).cfg;
    cfg.model = Some(model_path());
    cfg.slots = 8;
    cfg.context = 1024;
    cfg.max_body_bytes = 64 * 1024;
    cfg
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `url` and parse the JSON body.
pub async fn get_json(url: &str) -> serde_json::Value {
    reqwest::get(url)
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON body")
}

/// POST `body` to `url` and parse the JSON answer.
pub async fn post_json(url: &str, body: &serde_json::Value) -> serde_json::Value {
    reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON body")
}
