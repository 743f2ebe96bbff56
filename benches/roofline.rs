//! Single-stream decode against the machine's memory roofline.
//!
//! Decoding one sequence reads every weight once per token (and the sequence's keys and
//! values so far): its ceiling is the machine's read bandwidth divided by those bytes.
//! `cargo bench --bench roofline` measures, in each round:
//! - the read bandwidth with the compute pool's thread count: a streaming sum (plain, and
//!   prefetching 8 KB ahead as the decode matmuls do), the best of 10 passes as STREAM
//!   reports its best, on huge pages as the weights are, over 1 GiB (far beyond most caches) and over a
//!   buffer the size of a token's reads (what decode streams again and again: on a CPU
//!   whose last-level cache holds the weights, this is the faster one), right before and
//!   right after each decode figure (the highest of the four is its roofline);
//! - the bytes one decode token must read: every tensor of the file as stored (the output
//!   head in full; of the token embeddings, one row unless they are the head), plus keys
//!   and values (f16) at the mean position of the run;
//! - sluice's decode tokens/s (128 tokens after a 1-token prompt, the mean of 5, as
//!   llama-bench's tg128) at each kernel level the CPU has (`SLUICE_KERNEL`: each level in
//!   a process of its own, since the level is fixed at first use);
//! - llama.cpp's tg128 on the same file with the same threads (`llama-bench`), when built
//!   (`scripts/build-llama-cpp`, or `LLAMA_CPP_BIN`).
//!
//! It prints each round and then a table of medians: tokens/s, the fraction of the
//! roofline, and sluice / llama.cpp (the median of the rounds' ratios). `SLUICE_MODEL`
//! picks the file, `SLUICE_BENCH_TYPES=file,Q4_K_M,Q8_0` adds copies requantised with
//! llama.cpp's `llama-quantize`, `SLUICE_BENCH_ROUNDS` (default 3) the rounds,
//! `SLUICE_BENCH_LEVELS=avx2,avx512` the kernel levels, `SLUICE_BENCH_SLOTS` the engine's
//! slots (default 32, the server's default). The CPU model is printed first:
//! figures from one machine say nothing of another.

// Its `bin_dir` and `requantised` (the rest serves `benches/speed.rs`).
#[path = "speed/peer.rs"]
#[allow(dead_code)]
mod peer;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::gguf_file;
use rayon::prelude::*;
use sluice::engine::{EngineConfig, EngineHandle, Event, ValidRequest};

/// Tokens decoded per measured run (after the prompt's first), as llama-bench's tg128.
const TOKENS: usize = 128;
/// Runs averaged per figure.
const REPS: usize = 5;

fn main() {
    if let Ok(path) = std::env::var("SLUICE_ROOFLINE_CHILD") {
        println!("decode_tok_s={}", sluice_decode(Path::new(&path)));
        return;
    }
    let default = std::env::var_os("SLUICE_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(sluice::config::default_model_path);
    let types = std::env::var("SLUICE_BENCH_TYPES").unwrap_or_else(|_| "file".into());
    let rounds: usize = std::env::var("SLUICE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let levels = levels();
    let threads = sluice_kernels::threads::threads();
    let llama = peer::bin_dir();
    println!(
        "CPU: {}; {threads} threads; kernel levels {levels:?}",
        cpu_model()
    );
    if llama.is_none() {
        println!("llama.cpp not found (scripts/build-llama-cpp or LLAMA_CPP_BIN): sluice only");
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    let buf = ones((1 << 30) / 8);
    let mut rows = Vec::new();
    for dtype in types.split(',').map(str::trim) {
        let path = match (&llama, dtype) {
            (_, "file") => default.clone(),
            (Some(bin), t) => peer::requantised(bin, &default, t),
            (None, t) => panic!("{t} needs llama-quantize"),
        };
        let bytes = token_bytes(&path);
        let label = match dtype {
            "file" => path
                .file_name()
                .map_or("model".into(), |n| n.to_string_lossy().into_owned()),
            t => t.to_string(),
        };
        println!("{label}: {:.1} MB read per decode token", bytes / 1e6);
        // A buffer of a token's reads: what decode itself streams, cached or not.
        let token_buf = ones(bytes as usize / 8);
        // Rounds alternate the sides, so that both see the machine in the same state.
        let mut measured: Vec<Round> = Vec::new();
        let mut bandwidths: Vec<(f64, f64)> = Vec::new();
        // This VM's bandwidth moves by up to 2x within a minute (other tenants): each
        // figure is taken between two bandwidth measurements and set against the higher.
        let mut bracketed = |f: &dyn Fn() -> f64| {
            let mut measure = || {
                let far = pool.install(|| read_bandwidth(&buf));
                let near = pool.install(|| read_bandwidth(&token_buf));
                bandwidths.push((far, near));
                far.max(near)
            };
            let before = measure();
            let ts = f();
            let after = measure();
            (ts, before.max(after) / bytes)
        };
        for round in 0..rounds {
            let ours: Vec<(f64, f64)> = levels
                .iter()
                .map(|l| bracketed(&|| child(&path, l)))
                .collect();
            let theirs = llama
                .as_ref()
                .map(|bin| bracketed(&|| llama_decode(bin, &path, threads)));
            let show = |(ts, roof): (f64, f64)| format!("{ts:.1} tok/s of {roof:.1}");
            println!(
                "round {}: sluice {:?}; llama.cpp {:?}",
                round + 1,
                ours.iter().copied().map(show).collect::<Vec<_>>(),
                theirs.map(show),
            );
            measured.push(Round { ours, theirs });
        }
        let far = median(bandwidths.iter().map(|b| b.0).collect());
        let near = median(bandwidths.iter().map(|b| b.1).collect());
        rows.push((label, bytes, (far, near), measured));
    }
    println!(
        "\n| file | MB/token | read GB/s, 1 GiB | read GB/s, MB/token | roofline GB/s \
         | roofline tok/s | kernels | sluice tok/s | of roofline | llama.cpp tok/s \
         | of roofline | sluice / llama.cpp |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|");
    for (label, bytes, (far, near), measured) in rows {
        let roofs: Vec<f64> = measured
            .iter()
            .flat_map(|r| r.ours.iter().chain(r.theirs.iter()).map(|m| m.1))
            .collect();
        let roof = median(roofs);
        let them: Vec<(f64, f64)> = measured
            .iter()
            .filter_map(|r| r.theirs.map(|(ts, roof)| (ts, ts / roof)))
            .collect();
        let (them_ts, them_frac) = match them.is_empty() {
            true => ("-".to_string(), "-".to_string()),
            false => (
                format!("{:.1}", median(them.iter().map(|t| t.0).collect())),
                format!("{:.0}%", 100.0 * median(them.iter().map(|t| t.1).collect())),
            ),
        };
        for (i, level) in levels.iter().enumerate() {
            let ts = median(measured.iter().map(|r| r.ours[i].0).collect());
            let frac = median(measured.iter().map(|r| r.ours[i].0 / r.ours[i].1).collect());
            let ratio: Vec<f64> = measured
                .iter()
                .filter_map(|r| Some(r.ours[i].0 / r.theirs?.0))
                .collect();
            let ratio = match ratio.is_empty() {
                true => "-".to_string(),
                false => format!("{:.2}x", median(ratio)),
            };
            println!(
                "| {label} | {:.1} | {:.1} | {:.1} | {:.1} | {roof:.1} | {level} | {ts:.1} | \
                 {:.0}% | {them_ts} | {them_frac} | {ratio} |",
                bytes / 1e6,
                far / 1e9,
                near / 1e9,
                roof * bytes / 1e9,
                100.0 * frac,
            );
        }
    }
}

/// One round's figures for one file: each a decode speed and the roofline measured
/// around it (tokens/s).
struct Round {
    /// sluice at each level.
    ours: Vec<(f64, f64)>,
    /// llama.cpp.
    theirs: Option<(f64, f64)>,
}

/// The kernel levels to measure: `SLUICE_BENCH_LEVELS`, else every SIMD level the CPU has.
fn levels() -> Vec<String> {
    if let Ok(v) = std::env::var("SLUICE_BENCH_LEVELS") {
        return v.split(',').map(|s| s.trim().to_string()).collect();
    }
    use sluice_kernels::Simd;
    match Simd::detected() {
        Simd::Avx512 => vec!["avx2".into(), "avx512".into()],
        Simd::Avx2 => vec!["avx2".into()],
        _ => vec!["portable".into()],
    }
}

/// The CPU's model name (`/proc/cpuinfo`).
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Bytes one decode token reads from `path`'s weights, plus keys and values at the mean
/// position of a run (`TOKENS / 2` after one prompt token).
fn token_bytes(path: &Path) -> f64 {
    let mut f = std::fs::File::open(path).expect("the model file");
    let content = gguf_file::Content::read(&mut f).expect("a GGUF file");
    let size = |info: &gguf_file::TensorInfo| {
        let d = info.ggml_dtype;
        (info.shape.elem_count() / d.block_size() * d.type_size()) as f64
    };
    let tied = !content.tensor_infos.contains_key("output.weight");
    let mut bytes = 0.0;
    for (name, info) in &content.tensor_infos {
        bytes += match (name.as_str(), tied) {
            ("token_embd.weight", false) => size(info) / info.shape.dims()[0] as f64,
            _ => size(info),
        };
    }
    let arch = content.metadata["general.architecture"]
        .to_string()
        .expect("an architecture")
        .clone();
    let u = |key: &str| {
        content
            .metadata
            .get(&format!("{arch}.{key}"))
            .and_then(|v| v.to_u32().ok())
            .unwrap_or(0) as f64
    };
    let (layers, heads) = (u("block_count"), u("attention.head_count"));
    let kv_heads = match u("attention.head_count_kv") {
        0.0 => heads,
        n => n,
    };
    let head_dim = match u("attention.key_length") {
        0.0 => u("embedding_length") / heads.max(1.0),
        n => n,
    };
    let position = 1.0 + TOKENS as f64 / 2.0;
    bytes + layers * kv_heads * head_dim * 2.0 * 2.0 * position
}

/// `len` words of ones, on huge pages where the system allows them, as sluice keeps its
/// weights (`sluice_kernels::Huge`): on 4 KB pages every 4 KB read is a TLB miss, and the
/// ceiling would be set too low.
fn ones(len: usize) -> sluice_kernels::Huge<u64> {
    let mut w = sluice_kernels::Huge::zeroed(len);
    w.fill(1);
    w
}

/// Best read bandwidth, bytes/s, of 10 passes over `buf` with the current pool, each
/// pass read both plainly (the hardware prefetchers alone) and asking for every line 8 KB
/// ahead into L2, as the decode matmuls do (which is faster where the data comes from a
/// slow last-level cache): the faster of the two is the ceiling.
fn read_bandwidth(buf: &[u64]) -> f64 {
    let mut best = 0f64;
    for _ in 0..10 {
        for ahead in [false, true] {
            let start = Instant::now();
            let sum: u64 = buf.par_chunks(1 << 17).map(|w| sum_words(w, ahead)).sum();
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(sum, buf.len() as u64, "every word read");
            best = best.max(std::mem::size_of_val(buf) as f64 / secs);
        }
    }
    best
}

/// The sum of `words`, with the widest vector loads the CPU has, prefetching `ahead`.
fn sum_words(words: &[u64], ahead: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { sum_words_avx2(words, ahead) };
    }
    sum_plain(words, false)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_words_avx2(words: &[u64], ahead: bool) -> u64 {
    sum_plain(words, ahead)
}

/// Eight independent sums (the compiler makes them vector lanes), so that the loop is
/// bound by loads, not by one chain of adds; one 64-byte line per step, with `ahead` the
/// line 8 KB further asked for into L2.
#[inline(always)]
fn sum_plain(words: &[u64], ahead: bool) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
    let rest: u64 = chunks.remainder().iter().sum();
    for c in chunks {
        #[cfg(target_arch = "x86_64")]
        if ahead {
            // SAFETY: SSE is part of x86_64; a prefetch never faults, whatever the address.
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T1>(c.as_ptr().wrapping_add(1024) as *const i8);
            }
        }
        for (a, &w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(w);
        }
    }
    acc.iter().fold(rest, |s, &a| s.wrapping_add(a))
}

/// sluice's decode tokens/s on `path` at kernel level `level`, in a process of its own.
fn child(path: &Path, level: &str) -> f64 {
    let out = Command::new(std::env::current_exe().expect("this bench"))
        .env("SLUICE_ROOFLINE_CHILD", path)
        .env("SLUICE_KERNEL", level)
        .output()
        .expect("the bench runs itself");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{level}: {text}");
    text.lines()
        .find_map(|l| l.strip_prefix("decode_tok_s="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{level}: no figure in {text}"))
}

/// The child's measurement: decode through the engine, as `benches/speed.rs` measures it.
fn sluice_decode(path: &Path) -> f64 {
    let loaded = sluice::load_model(path, &Default::default()).expect("the model loads");
    let tok = Arc::new(loaded.tokenizer);
    // The server's default slot count unless `SLUICE_BENCH_SLOTS` says otherwise: one
    // person chatting with a default server decodes beside 31 empty slots.
    let slots = std::env::var("SLUICE_BENCH_SLOTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let cfg = EngineConfig {
        slots,
        context: 1024,
        spec_tokens: 0,
        ..Default::default()
    };
    let eng = EngineHandle::start(loaded.model, tok.clone(), cfg);
    let first = tok.encode("The").expect("a prompt")[..1].to_vec();
    let decode = |tokens: usize| {
        let mut rx = eng
            .submit(ValidRequest::greedy(first.clone(), tokens + 1))
            .expect("submitted");
        let mut start = None;
        let mut n = 0;
        loop {
            match rx.blocking_recv() {
                Some(Event::Token(_)) => {
                    n += 1;
                    start.get_or_insert_with(Instant::now);
                }
                Some(Event::Done(_)) => break,
                other => panic!("{other:?}"),
            }
        }
        let secs = start.expect("a token").elapsed().as_secs_f64();
        (n - 1) as f64 / secs
    };
    decode(8); // warm-up: buffers and pages touched outside the timed runs
    (0..REPS).map(|_| decode(TOKENS)).sum::<f64>() / REPS as f64
}

/// llama.cpp's tg128 on `path` with `threads` threads.
fn llama_decode(bin: &Path, path: &Path, threads: usize) -> f64 {
    let out = Command::new(bin.join("llama-bench"))
        .arg("-m")
        .arg(path)
        .args([
            "-p",
            "0",
            "-n",
            &TOKENS.to_string(),
            "-t",
            &threads.to_string(),
        ])
        .args(["-o", "json"])
        .output()
        .expect("llama-bench runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("llama-bench json");
    v[0]["avg_ts"].as_f64().expect("avg_ts")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
