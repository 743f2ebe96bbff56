//! `--kv-huge-pages` is opt-in: a server given it holds its KV pool on transparent huge
//! pages, one without it does not. Its own test binary: it spawns servers while
//! `tests/kv_alloc.rs` measures its own process's resident memory.

mod common;

/// The server's `AnonHugePages` (kB): memory on transparent huge pages.
fn huge_kb_of(pid: u32) -> u64 {
    common::proc_kb(&format!("{pid}/smaps_rollup"), "AnonHugePages").unwrap_or(0)
}

/// `--kv-huge-pages` puts the pool on huge pages: one short request then makes 2 MB per
/// layer, keys and values, and head resident on them, here (2 slots: a 94 MB pool, whose
/// small maps the kernel joins into larger areas) most of the pool; without it the pool
/// stays on ordinary pages (only the weights are on huge ones).
#[tokio::test]
#[cfg_attr(not(target_os = "linux"), ignore = "reads /proc")]
async fn huge_kv_pages_are_opt_in() {
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    if !mode.as_deref().is_ok_and(|m| !m.contains("[never]")) {
        eprintln!("SKIPPED huge_kv_pages_are_opt_in: transparent huge pages are off here");
        return;
    }
    let mut huge = Vec::new();
    for flag in [None, Some("--kv-huge-pages")] {
        let args: Vec<&str> = ["serve", "--slots", "2"].into_iter().chain(flag).collect();
        let s = common::Spawned::ready(&args, &[]).await;
        let body = serde_json::json!({"prompt": "The river", "max_tokens": 2, "temperature": 0});
        let r = reqwest::Client::new()
            .post(format!("{}/v1/completions", s.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        huge.push(huge_kb_of(s.id()) / 1024);
    }
    // Measured: 82 MB more (176 against 94).
    assert!(
        huge[1] >= huge[0] + 40,
        "{} MB on huge pages with --kv-huge-pages, {} MB without",
        huge[1],
        huge[0]
    );
}
