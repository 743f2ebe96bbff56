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
//!   and values (f16) at the mean position of the run; and the file's matrices by type,
//!   as shares of their bytes (a copy named Q4_K_M may be mostly Q5_0);
//! - sluice's decode tokens/s (128 tokens after a 1-token prompt, the mean of 5, as
//!   llama-bench's tg128) at each kernel level the CPU has (`SLUICE_KERNEL`: each level in
//!   a process of its own, since the level is fixed at first use);
//! - llama.cpp's tg128 on the same file with the same threads (`llama-bench`), when built
//!   (`scripts/build-llama-cpp`, or `LLAMA_CPP_BIN`);
//! - paired windows, for both: 12 runs of 32 tokens, each set against the read rate of
//!   the compute threads over a buffer the size of a token's reads measured right before
//!   and right after it (the rate over the window's passes, not the best pass). On a VM
//!   whose read rate swings by 2x within seconds as other tenants come and go, a best pass
//!   caught in a quiet moment says little of the state the decode figure ran in; two
//!   windows a few milliseconds apart see the same state.
//!
//! It prints each round (with every window's decode and read rates, GB/s) and then a
//! table of medians: tokens/s, the fraction of the roofline, the median fraction of the
//! paired windows' read rate, and sluice / llama.cpp (the median of the rounds' ratios).
//! `SLUICE_MODEL` picks the file, `SLUICE_BENCH_TYPES=file,Q4_K_M,Q8_0` adds copies
//! requantised with llama.cpp's `llama-quantize`, `SLUICE_BENCH_ROUNDS` (default 3) the
//! rounds, `SLUICE_BENCH_LEVELS=avx2,avx512` the kernel levels, `SLUICE_BENCH_SLOTS` the
//! engine's slots (default 32, the server's default). The CPU model is printed first:
//! figures from one machine say nothing of another. `SLUICE_BENCH_REGIONS=1` adds, for
//! each window, the rate at which each matmul stage streamed its weights
//! (`roofline/split.rs`), and after each decode figure the read rate of a token's bytes
//! cut into as many parallel regions as a decode token has (four a layer and the head),
//! and into three and two a layer, both on stderr.

#[path = "roofline/file.rs"]
mod file;
// Its `bin_dir` and `requantised` (the rest serves `benches/speed.rs`).
#[path = "speed/peer.rs"]
#[allow(dead_code)]
mod peer;
#[path = "roofline/read.rs"]
mod read;
#[path = "roofline/split.rs"]
mod split;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::engine::{EngineConfig, EngineHandle, Event, ValidRequest};
use sluice_kernels::stages;

/// Tokens decoded per measured run (after the prompt's first), as llama-bench's tg128.
const TOKENS: usize = 128;
/// Runs averaged per figure.
const REPS: usize = 5;
/// Tokens decoded in each paired window (see [`read::window_rate`]).
const WINDOW: usize = 32;
/// Paired windows per decode figure.
const WINDOWS: usize = 12;

fn main() {
    if let Ok(path) = std::env::var("SLUICE_ROOFLINE_CHILD") {
        let (ts, windows) = sluice_decode(Path::new(&path));
        println!("decode_tok_s={ts}");
        let pairs: Vec<String> = windows
            .iter()
            .map(|w| format!("{}:{}:{}", w.0, w.1, w.2))
            .collect();
        println!("windows={}", pairs.join(","));
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
    let buf = read::ones((1 << 30) / 8);
    let mut rows = Vec::new();
    for dtype in types.split(',').map(str::trim) {
        let path = match (&llama, dtype) {
            (_, "file") => default.clone(),
            (Some(bin), t) => peer::requantised(bin, &default, t),
            (None, t) => panic!("{t} needs llama-quantize"),
        };
        let content = file::gguf(&path);
        let bytes = file::token_bytes(&content, TOKENS);
        let window_bytes = file::token_bytes(&content, WINDOW);
        let label = match dtype {
            "file" => path
                .file_name()
                .map_or("model".into(), |n| n.to_string_lossy().into_owned()),
            t => t.to_string(),
        };
        println!("{label}: {:.1} MB read per decode token", bytes / 1e6);
        println!(
            "  its matrices by type, of their bytes: {}",
            file::type_mix(&content)
        );
        // A buffer of a token's reads: what decode itself streams, cached or not.
        let token_buf = read::ones(bytes as usize / 8);
        let window_buf = read::ones(window_bytes as usize / 8);
        // Rounds alternate the sides, so that both see the machine in the same state.
        let mut measured: Vec<Round> = Vec::new();
        let mut bandwidths: Vec<(f64, f64)> = Vec::new();
        // This VM's bandwidth moves by up to 2x within a minute (other tenants): each
        // figure is taken between two bandwidth measurements and set against the higher.
        let mut bracketed = |f: &dyn Fn() -> (f64, Vec<(f64, f64, f64)>)| {
            let mut measure = || {
                let far = pool.install(|| read::best_rate(&buf));
                let near = pool.install(|| read::best_rate(&token_buf));
                bandwidths.push((far, near));
                far.max(near)
            };
            let before = measure();
            let (ts, windows) = f();
            let after = measure();
            Measure {
                ts,
                roof: before.max(after) / bytes,
                windows,
            }
        };
        for round in 0..rounds {
            let ours: Vec<Measure> = levels
                .iter()
                .map(|l| bracketed(&|| child(&path, l)))
                .collect();
            let theirs = llama.as_ref().map(|bin| {
                bracketed(&|| {
                    let ts = llama_decode(bin, &path, threads, TOKENS, REPS);
                    let windows = (0..WINDOWS)
                        .map(|_| {
                            read::window(&window_buf, window_bytes, Duration::ZERO, || {
                                llama_decode(bin, &path, threads, WINDOW, 1)
                            })
                        })
                        .collect();
                    (ts, windows)
                })
            });
            let show = |m: &Measure| {
                format!(
                    "{:.1} tok/s of {:.1}, windows at {:.0}%",
                    m.ts,
                    m.roof,
                    100.0 * median(fractions(m))
                )
            };
            let pairs = |m: &Measure| {
                let gbs =
                    |w: &(f64, f64, f64)| format!("{:.1}/{:.1}@{:.0}ns", w.0 / 1e9, w.1 / 1e9, w.2);
                m.windows.iter().map(gbs).collect::<Vec<_>>().join(" ")
            };
            println!(
                "round {}: sluice {:?}; llama.cpp {:?}",
                round + 1,
                ours.iter().map(show).collect::<Vec<_>>(),
                theirs.as_ref().map(show),
            );
            for (level, m) in levels.iter().zip(&ours) {
                println!(
                    "  sluice {level} windows, decode/read GB/s@crossing: {}",
                    pairs(m)
                );
            }
            if let Some(m) = &theirs {
                println!(
                    "  llama.cpp windows, decode/read GB/s@crossing: {}",
                    pairs(m)
                );
            }
            measured.push(Round { ours, theirs });
        }
        let far = median(bandwidths.iter().map(|b| b.0).collect());
        let near = median(bandwidths.iter().map(|b| b.1).collect());
        rows.push((label, bytes, (far, near), measured));
    }
    println!(
        "\n| file | MB/token | read GB/s, 1 GiB | read GB/s, MB/token | roofline GB/s \
         | roofline tok/s | kernels | sluice tok/s | of roofline | of window rate \
         | llama.cpp tok/s | of roofline | of window rate | sluice / llama.cpp |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (label, bytes, (far, near), measured) in rows {
        let roofs: Vec<f64> = measured
            .iter()
            .flat_map(|r| r.ours.iter().chain(r.theirs.iter()).map(|m| m.roof))
            .collect();
        let roof = median(roofs);
        let theirs: Vec<&Measure> = measured.iter().filter_map(|r| r.theirs.as_ref()).collect();
        let [them_ts, them_frac, them_window] = match theirs.is_empty() {
            true => ["-".to_string(), "-".to_string(), "-".to_string()],
            false => {
                let (ts, frac, window) = summary(&theirs);
                [format!("{ts:.1}"), percent(frac), percent(window)]
            }
        };
        for (i, level) in levels.iter().enumerate() {
            let ours: Vec<&Measure> = measured.iter().map(|r| &r.ours[i]).collect();
            let (ts, frac, window) = summary(&ours);
            let ratio: Vec<f64> = measured
                .iter()
                .filter_map(|r| Some(r.ours[i].ts / r.theirs.as_ref()?.ts))
                .collect();
            let ratio = match ratio.is_empty() {
                true => "-".to_string(),
                false => format!("{:.2}x", median(ratio)),
            };
            println!(
                "| {label} | {:.1} | {:.1} | {:.1} | {:.1} | {roof:.1} | {level} | {ts:.1} | \
                 {} | {} | {them_ts} | {them_frac} | {them_window} | {ratio} |",
                bytes / 1e6,
                far / 1e9,
                near / 1e9,
                roof * bytes / 1e9,
                percent(frac),
                percent(window),
            );
        }
    }
}

/// One decode figure: tokens/s, the roofline measured around it (tokens/s), and each
/// paired window's decode and read rates (bytes/s) and the line crossing time between
/// two threads just before it (ns, `read::crossing_ns`).
struct Measure {
    ts: f64,
    roof: f64,
    windows: Vec<(f64, f64, f64)>,
}

/// The fraction of its read rate each window's decode reached.
fn fractions(m: &Measure) -> Vec<f64> {
    m.windows.iter().map(|w| w.0 / w.1).collect()
}

/// One round's figures for one file.
struct Round {
    /// sluice at each level.
    ours: Vec<Measure>,
    /// llama.cpp.
    theirs: Option<Measure>,
}

/// The medians over rounds of the tokens/s and the fraction of the roofline, and the
/// median of every paired window of every round.
fn summary(measures: &[&Measure]) -> (f64, f64, f64) {
    let ts = median(measures.iter().map(|m| m.ts).collect());
    let frac = median(measures.iter().map(|m| m.ts / m.roof).collect());
    let window = median(measures.iter().flat_map(|m| fractions(m)).collect());
    (ts, frac, window)
}

fn percent(f: f64) -> String {
    format!("{:.0}%", 100.0 * f)
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

/// sluice's decode tokens/s on `path` at kernel level `level`, in a process of its own,
/// and its paired windows.
fn child(path: &Path, level: &str) -> (f64, Vec<(f64, f64, f64)>) {
    let out = Command::new(std::env::current_exe().expect("this bench"))
        .env("SLUICE_ROOFLINE_CHILD", path)
        .env("SLUICE_KERNEL", level)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("the bench runs itself");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{level}: {text}");
    let ts = text
        .lines()
        .find_map(|l| l.strip_prefix("decode_tok_s="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{level}: no figure in {text}"));
    let windows = text
        .lines()
        .find_map(|l| l.strip_prefix("windows="))
        .map(|v| {
            let triple = |w: &str| {
                let mut f = w.split(':').map(|x| x.parse().ok());
                Some((f.next()??, f.next()??, f.next()??))
            };
            v.split(',').filter_map(triple).collect()
        })
        .unwrap_or_else(|| panic!("{level}: no windows in {text}"));
    (ts, windows)
}

/// The child's measurement: decode through the engine, as `benches/speed.rs` measures it;
/// then [`WINDOWS`] runs of [`WINDOW`] tokens, each between two reads of a buffer the
/// size of a token's reads on the same compute threads ([`read::window_rate`]), each
/// giving its decode rate and the mean of those read rates (bytes/s).
fn sluice_decode(path: &Path) -> (f64, Vec<(f64, f64, f64)>) {
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
    let ts = (0..REPS).map(|_| decode(TOKENS)).sum::<f64>() / REPS as f64;
    let content = file::gguf(path);
    let bytes = file::token_bytes(&content, WINDOW);
    let buf = read::ones(bytes as usize / 8);
    // The engine's step is over once its last event is out, but give it time to return
    // its compute threads: a read that found them busy would run on one thread and set
    // the ceiling too low.
    let settle = Duration::from_millis(10);
    let split = std::env::var_os("SLUICE_BENCH_REGIONS").is_some();
    let (matrices, regions) = if split {
        (split::stage_bytes(&content), split::regions(&content))
    } else {
        (Vec::new(), 0)
    };
    let windows = (0..WINDOWS)
        .map(|_| {
            if !split {
                return read::window(&buf, bytes, settle, || decode(WINDOW));
            }
            let _ = stages::take();
            let w = read::window(&buf, bytes, settle, || {
                stages::set_on(true);
                let r = decode(WINDOW);
                stages::set_on(false);
                r
            });
            split::print_stage_rates(w, &matrices, &stages::take());
            w
        })
        .collect();
    if split {
        split::cut_reads(&buf, regions);
    }
    (ts, windows)
}

/// llama.cpp's decode tokens/s on `path` with `threads` threads: the mean of `reps` runs
/// of `tokens` (`TOKENS`, `REPS`: llama-bench's tg128).
fn llama_decode(bin: &Path, path: &Path, threads: usize, tokens: usize, reps: usize) -> f64 {
    let out = Command::new(bin.join("llama-bench"))
        .arg("-m")
        .arg(path)
        .args([
            "-p",
            "0",
            "-n",
            &tokens.to_string(),
            "-t",
            &threads.to_string(),
            "-r",
            &reps.to_string(),
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
    let n = v.len();
    // An even count (36 windows): the mean of the two middle values.
    match n % 2 {
        0 => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        _ => v[n / 2],
    }
}
