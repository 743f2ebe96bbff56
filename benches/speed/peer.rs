//! llama.cpp on the same GGUF, in the same run: `llama-bench` (pp512, tg128) and
//! `llama-batched-bench` (128-token prompts, 128 new tokens, 8 and 32 streams), 2 threads.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// llama.cpp's figures for one model, tokens/s.
#[derive(Debug, Default, Clone, Copy)]
pub struct Figures {
    pub prefill: f64,
    pub decode: f64,
    pub streams8: f64,
    pub streams32: f64,
    /// 32 streams sampling at temperature 0.8, top-p 0.95 (sluice only: llama-batched-bench
    /// decodes greedily).
    pub sampled32: f64,
}

/// The directory of llama.cpp's binaries: `LLAMA_CPP_BIN`, else where
/// `scripts/build-llama-cpp` puts them.
pub fn bin_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("LLAMA_CPP_BIN")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/sluice-peers/llama.cpp-noamx/bin"))
        })?;
    dir.join("llama-bench").exists().then_some(dir)
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("llama.cpp runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs both llama.cpp benchmarks on `model` with `threads` threads.
pub fn measure(bin: &Path, model: &Path, threads: usize) -> Figures {
    let t = threads.to_string();
    let bench: Value = serde_json::from_str(&run(Command::new(bin.join("llama-bench"))
        .arg("-m")
        .arg(model)
        .args(["-p", "512", "-n", "128", "-t", &t, "-o", "json"])))
    .expect("llama-bench json");
    let mut f = Figures::default();
    for r in bench.as_array().expect("runs") {
        let ts = r["avg_ts"].as_f64().unwrap_or(0.0);
        match (r["n_prompt"].as_u64(), r["n_gen"].as_u64()) {
            (Some(512), Some(0)) => f.prefill = ts,
            (Some(0), Some(128)) => f.decode = ts,
            _ => {}
        }
    }
    let batched = run(Command::new(bin.join("llama-batched-bench"))
        .arg("-m")
        .arg(model)
        .args([
            "-c", "8192", "-b", "2048", "-ub", "512", "-npp", "128", "-ntg", "128",
        ])
        .args(["-npl", "8,32", "-t", &t, "--output-format", "jsonl"]));
    for line in batched.lines().filter(|l| l.starts_with('{')) {
        let r: Value = serde_json::from_str(line).expect("jsonl");
        let tg = r["speed_tg"].as_f64().unwrap_or(0.0);
        match r["pl"].as_u64() {
            Some(8) => f.streams8 = tg,
            Some(32) => f.streams32 = tg,
            _ => {}
        }
    }
    f
}

/// `model` requantised to `dtype` (e.g. "Q4_0") next to it, made once with
/// `llama-quantize --allow-requantize`.
pub fn requantised(bin: &Path, model: &Path, dtype: &str) -> PathBuf {
    let name = model
        .file_name()
        .and_then(|n| n.to_str())
        .expect("file name");
    let stem = name.strip_suffix(".gguf").unwrap_or(name);
    let out = model.with_file_name(format!("{stem}.requant-{dtype}.gguf"));
    if !out.exists() {
        run(Command::new(bin.join("llama-quantize"))
            .arg("--allow-requantize")
            .arg(model)
            .arg(&out)
            .arg(dtype));
    }
    out
}
