//! A weight reload hands the replaced weights' memory back to the system: a real server
//! process, reloaded several times, comes back to its resident size before the reloads.
//! (glibc's malloc otherwise keeps the freed weights resident: `return_freed_memory` in
//! `crates/sluice-kernels/src/alloc.rs`.) Its own process, so that nothing else running in
//! the tests moves the figure.

mod common;

use std::time::{Duration, Instant};

use common::{Spawned, model_path};
use serde_json::json;

const TOKEN: &str = "test-admin-token";

/// The server process's resident size, in KB.
fn rss_kb(pid: u32) -> u64 {
    common::proc_kb(&format!("{pid}/status"), "VmRSS").expect("the server's VmRSS")
}

async fn complete(base: &str) {
    let body = json!({"prompt": "The river town", "max_tokens": 4, "temperature": 0});
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
#[cfg_attr(not(target_os = "linux"), ignore = "reads /proc")]
async fn reloads_give_the_replaced_weights_memory_back() {
    let path = model_path();
    let dir = path.parent().unwrap().to_str().unwrap().to_string();
    let server = Spawned::ready(
        &[
            "serve",
            "--admin-token",
            TOKEN,
            "--reload-dir",
            &dir,
            "--slots",
            "2",
        ],
        &[],
    )
    .await;
    complete(&server.base).await;
    let before = rss_kb(server.id());
    let file_kb = std::fs::metadata(&path).unwrap().len() / 1024;
    let client = reqwest::Client::new();
    for i in 0..6 {
        let r = client
            .post(format!("{}/admin/reload", server.base))
            .bearer_auth(TOKEN)
            .json(&json!({"path": path, "mode": "keep", "version": format!("v{}", i + 2)}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "reload {i}");
        complete(&server.base).await;
    }
    // The old weights are dropped (and their memory returned) just after each reply: wait
    // for the last, up to 30 s.
    let limit = before + file_kb / 2;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut now = rss_kb(server.id());
    while now > limit && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = rss_kb(server.id());
    }
    assert!(
        now <= limit,
        "resident {} MB after 6 reloads, {} MB before (the weights file is {} MB)",
        now / 1024,
        before / 1024,
        file_kb / 1024
    );
}
