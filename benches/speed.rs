//! Speed of the model runtime and the engine on the default model.
//!
//! `cargo bench --bench speed` (or `make bench`) prints:
//! - prefill tokens/s of one 512-token prompt and single-sequence decode tokens/s (one
//!   request at a time through the engine, as llama-bench's pp512 and tg128, and like
//!   them the mean of 5 runs);
//! - for 1, 8 and 32 concurrent requests (128-token prompts, 128 new tokens) through the
//!   engine: aggregate decode tokens/s while all of them decode, mean and max time to
//!   first token, wall time,
//!   and the prefill padding ratio; at 32, greedy and sampled (temperature 0.8, top-p 0.95).
//!
//! Then, when llama.cpp is built (`scripts/build-llama-cpp`, or `LLAMA_CPP_BIN`), the
//! same four figures from `llama-bench` and `llama-batched-bench` on the same file, and a
//! table with the ratio sluice / llama.cpp.
//!
//! `SLUICE_BENCH_ROUNDS=3` measures both sides three times, alternating (sluice, llama.cpp,
//! sluice, ...), and prints the medians, the ratio being the median of the rounds' ratios:
//! on a host whose speed drifts, one round compares two different machines.
//! `SLUICE_BENCH_CONCURRENCY=1,8` picks the engine rows; `SLUICE_MODEL` the model (a GGUF
//! file or a Hugging Face folder); `SLUICE_BENCH_TYPES=file,Q4_K_M,Q8_0` benchmarks the file
//! as it is (`file`, the default) and requantised copies of it (made with llama.cpp's
//! `llama-quantize --allow-requantize`).

#[path = "speed/peer.rs"]
mod peer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::engine::{EngineConfig, EngineHandle, Event, EventStream, ValidRequest};
use sluice::tokenizer::Tokenizer;

fn model_path() -> std::path::PathBuf {
    std::env::var_os("SLUICE_MODEL")
        .map(Into::into)
        .unwrap_or_else(sluice::config::default_model_path)
}

fn prompt(tok: &Tokenizer, n: usize, salt: usize) -> Vec<u32> {
    let text = format!(
        "Story {salt}: the river carried stones and light across the quiet valley, and every \
         morning the old keeper counted the boats that passed beneath the bridge. "
    )
    .repeat(n / 20 + 2);
    let mut ids = tok.encode(&text).unwrap();
    ids.truncate(n);
    ids
}

/// Seconds from submission to the end of a request, and from its first token to its end.
fn timed(eng: &EngineHandle, prompt: Vec<u32>, max_tokens: usize) -> (f64, f64) {
    let start = Instant::now();
    let mut rx: EventStream = eng
        .submit(ValidRequest::greedy(prompt, max_tokens))
        .unwrap();
    let mut first = None;
    loop {
        match rx.blocking_recv() {
            Some(Event::Token(_)) => {
                first.get_or_insert_with(Instant::now);
            }
            Some(Event::Done(_)) => break,
            other => panic!("{other:?}"),
        }
    }
    let first = first.expect("a token");
    (start.elapsed().as_secs_f64(), first.elapsed().as_secs_f64())
}

/// Repetitions of each single-request figure, averaged as llama-bench averages its own
/// (`avg_ts` of its default 5).
const REPS: usize = 5;

/// Added to every prompt's salt per round, so that no round reuses another's prompts.
const ROUND_SALT: usize = 1000;

/// Prefill of one 512-token prompt and decode of one sequence, through the engine: the
/// mean tokens/s of `REPS` runs, each prompt fresh (a new first sentence, so no prefix is
/// reused).
fn runtime(eng: &EngineHandle, tok: &Tokenizer, round: usize) -> (f64, f64) {
    let salt = round * ROUND_SALT;
    // Warm-up as llama-bench's: a whole prompt of the measured length (its own prompt, so
    // no prefix is reused), then a token of decode. A 16-token warm-up left the first
    // round's prefill the slowest of three in every run (buffers and KV pages touched for
    // the first time inside the timed runs).
    timed(eng, prompt(tok, 512, salt + 1), 2);
    let mean = |f: &dyn Fn(usize) -> f64| (0..REPS).map(f).sum::<f64>() / REPS as f64;
    let prefill = mean(&|rep| 512.0 / timed(eng, prompt(tok, 512, salt + 100 + rep), 1).0);
    // Like llama-bench's tg128: 128 tokens from an (almost) empty context.
    let decode = mean(&|rep| 128.0 / timed(eng, prompt(tok, 1, salt + 200 + rep), 129).1);
    println!(
        "single request: prefill 512 tokens {prefill:.1} tok/s, decode 1 sequence {decode:.1} tok/s"
    );
    (prefill, decode)
}

async fn engine_row(
    eng: &EngineHandle,
    tok: &Tokenizer,
    n: usize,
    sampled: bool,
    round: usize,
) -> f64 {
    let (p0, pad0) = eng.prefill_token_counts();
    let start = Instant::now();
    let streams: Vec<_> = (0..n)
        .map(|i| {
            // The sampled run's prompts differ from the greedy run's: reusing their keys
            // and values would skip its prefill and make its figure incomparable.
            let salt = round * ROUND_SALT + if sampled { n + i } else { i };
            let mut r = ValidRequest::greedy(prompt(tok, 128, salt), 128);
            r.stop_ids.clear();
            if sampled {
                r.params.temperature = 0.8;
                r.params.top_p = 0.95;
                r.params.seed = i as u64;
            }
            eng.submit(r).expect("submit")
        })
        .collect();
    // Every token's arrival time, per stream.
    let results = futures::future::join_all(streams.into_iter().map(|mut rx| async move {
        let mut times = Vec::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Token(_) => times.push(Instant::now()),
                Event::Done(_) => break,
                Event::Error(e) => panic!("{e}"),
                Event::Prompt(_) | Event::Beams(_) => {}
            }
        }
        assert!(!times.is_empty(), "a token");
        times
    }))
    .await;
    let wall = start.elapsed();
    let ttfts: Vec<Duration> = results.iter().map(|t| t[0] - start).collect();
    // As llama-batched-bench's generation speed, where every stream decodes together:
    // the tokens made while all `n` streams are decoding (from the last first token to
    // the first last one) over that time. Tokens made while some streams were still in
    // prefill, or already done, count for neither.
    let last_first = results.iter().map(|t| t[0]).max().unwrap();
    let first_last = results
        .iter()
        .filter_map(|t| t.last())
        .min()
        .copied()
        .unwrap();
    let decoded: usize = results
        .iter()
        .map(|t| {
            t.iter()
                .filter(|&&at| at > last_first && at <= first_last)
                .count()
        })
        .sum();
    let agg = decoded as f64 / (first_last - last_first).as_secs_f64().max(1e-9);
    let mean_ttft = ttfts.iter().sum::<Duration>() / n as u32;
    let max_ttft = ttfts.iter().max().unwrap();
    let (p1, pad1) = eng.prefill_token_counts();
    let padding = (pad1 - pad0) as f64 / ((p1 - p0) + (pad1 - pad0)).max(1) as f64;
    let kind = if sampled { "sampled" } else { "greedy" };
    println!(
        "engine {n:>2} concurrent, {kind:>7}: decode {agg:7.1} tok/s aggregate, TTFT mean {:6.0} ms max {:6.0} ms, wall {:5.1} s, padding {:.1}%",
        mean_ttft.as_secs_f64() * 1e3,
        max_ttft.as_secs_f64() * 1e3,
        wall.as_secs_f64(),
        padding * 100.0
    );
    agg
}

/// sluice on one model: the engine, its tokenizer and the concurrency levels to measure.
struct Ours {
    eng: EngineHandle,
    tok: Arc<Tokenizer>,
    levels: Vec<usize>,
    rt: tokio::runtime::Runtime,
}

impl Ours {
    fn start(path: &std::path::Path) -> Self {
        let loaded =
            sluice::load_model(path, &Default::default()).expect("run scripts/fetch-model first");
        let (model, tok) = (loaded.model, Arc::new(loaded.tokenizer));
        println!(
            "{}: kernel level {:?}, threads {}",
            path.display(),
            sluice_kernels::Simd::current(),
            sluice_kernels::threads::threads()
        );
        let levels = std::env::var("SLUICE_BENCH_CONCURRENCY")
            .unwrap_or_else(|_| "1,8,32".into())
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        // No speculation: these figures compare the runtime with llama-bench's, which
        // does not speculate, and the bench's prompts repeat themselves (drafts would be
        // accepted). `benches/spec` measures speculation.
        let cfg = EngineConfig {
            slots: 32,
            context: 1024,
            spec_tokens: 0,
            ..Default::default()
        };
        let eng = EngineHandle::start(model, tok.clone(), cfg);
        let rt = tokio::runtime::Runtime::new().unwrap();
        Self {
            eng,
            tok,
            levels,
            rt,
        }
    }

    /// sluice's figures, tokens/s, with round `round`'s prompts.
    fn measure(&self, round: usize) -> peer::Figures {
        let (prefill, decode) = runtime(&self.eng, &self.tok, round);
        let mut f = peer::Figures {
            prefill,
            decode,
            ..Default::default()
        };
        for &n in &self.levels {
            let row = |sampled| engine_row(&self.eng, &self.tok, n, sampled, round);
            let agg = self.rt.block_on(row(false));
            if n == 32 {
                // Temperature 0.8, top-p 0.95: what most traffic sends.
                f.sampled32 = self.rt.block_on(row(true));
            }
            match n {
                8 => f.streams8 = agg,
                32 => f.streams32 = agg,
                _ => {}
            }
        }
        f
    }
}

/// The median of `v` (the lower middle of an even count); 0 when empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0.0)
}

fn main() {
    let default = model_path();
    let types = std::env::var("SLUICE_BENCH_TYPES").unwrap_or_else(|_| "file".into());
    let llama = peer::bin_dir();
    if llama.is_none() {
        println!("llama.cpp not found (scripts/build-llama-cpp or LLAMA_CPP_BIN): sluice only");
    }
    let rounds_wanted: usize = std::env::var("SLUICE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut table = Vec::new();
    for dtype in types.split(',').map(str::trim) {
        let path = match (&llama, dtype) {
            (_, "file") => default.clone(),
            (Some(bin), t) => peer::requantised(bin, &default, t),
            (None, t) => panic!("{t} needs llama-quantize"),
        };
        // Rounds alternate sluice and llama.cpp, so that both see the machine in the same
        // state: this VM's speed drifts by up to 2x within minutes.
        let ours = Ours::start(&path);
        let mut rounds = Vec::new();
        for round in 0..rounds_wanted {
            let us = ours.measure(round);
            let them = llama
                .as_ref()
                .map(|bin| peer::measure(bin, &path, sluice_kernels::threads::threads()));
            if rounds_wanted > 1 {
                println!("round {}: sluice {us:?}, llama.cpp {them:?}", round + 1);
            }
            rounds.push((us, them));
        }
        drop(ours);
        let label = match dtype {
            "file" => default
                .file_name()
                .map_or("model".into(), |n| n.to_string_lossy().into_owned()),
            t => t.to_string(),
        };
        table.push((label, rounds));
    }
    println!("\n| model | figure (tok/s) | llama.cpp | sluice | sluice / llama.cpp |");
    println!("|---|---|---:|---:|---:|");
    type Pick = fn(&peer::Figures) -> f64;
    let figures: [(&str, Pick, bool); 5] = [
        ("prefill 512", |f| f.prefill, true),
        ("decode, 1 stream", |f| f.decode, true),
        ("decode, 8 streams (aggregate)", |f| f.streams8, true),
        ("decode, 32 streams (aggregate)", |f| f.streams32, true),
        (
            "decode, 32 streams sampled (aggregate)",
            |f| f.sampled32,
            false,
        ),
    ];
    for (dtype, rounds) in table {
        for (name, pick, peer) in figures {
            // Medians over the rounds; the ratio is the median of each round's ratio.
            let us = median(rounds.iter().map(|(u, _)| pick(u)).collect());
            if us == 0.0 {
                continue; // not measured (SLUICE_BENCH_CONCURRENCY)
            }
            let pairs: Vec<(f64, f64)> = rounds
                .iter()
                .filter_map(|(u, t)| Some((pick(u), pick(t.as_ref()?))))
                .filter(|&(u, t)| peer && u > 0.0 && t > 0.0)
                .collect();
            let (them, ratio) = if pairs.is_empty() {
                ("-".into(), "-".into())
            } else {
                (
                    format!("{:.1}", median(pairs.iter().map(|p| p.1).collect())),
                    format!("{:.2}x", median(pairs.iter().map(|p| p.0 / p.1).collect())),
                )
            };
            println!("| {dtype} | {name} | {them} | {us:.1} | {ratio} |");
        }
    }
}
