//! Cost of choosing one token from a real logits row, per sampling setting: microseconds
//! per row for greedy, the served benchmark's sampled setting (temperature 0.8, top-p
//! 0.95), plain temperature, top-k, min-p and penalties, and for the log-probability that
//! a choice reports when the request asks for it. The rows are the default model's logits after 32 different
//! prompts, so the distributions are the ones a server samples from.
//!
//! `cargo bench --bench sampling` (the default model), or `SLUICE_MODEL=FILE.gguf`.

use sluice::engine::GgufFile;
use sluice::engine::SamplingParams;
use sluice::engine::testing::{History, sample, scores};
use sluice::engine::testing::{KvSlab, TokenRow, load_model};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let path = std::env::var_os("SLUICE_MODEL")
        .map(Into::into)
        .unwrap_or_else(sluice::config::default_model_path);
    let file = GgufFile::open(&path).expect("a GGUF file");
    let m = load_model(&file).expect("a model sluice runs");
    println!("{}", path.display());
    let s = m.shape().clone();
    let n = 32;
    let mut kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, n, 64);
    let rows: Vec<TokenRow> = (0..n * 16)
        .map(|i| TokenRow {
            token: 100 + ((i * 7919) % 20_000) as u32,
            slot: i / 16,
            pos: i % 16,
        })
        .collect();
    let want: Vec<usize> = (0..n).map(|k| k * 16 + 15).collect();
    let logits = m.forward(&mut kv, &rows, &want);
    let history = History {
        prompt: (0..128).collect(),
        generated: (200..264).collect(),
    };
    let p = |f: &dyn Fn(&mut SamplingParams)| {
        let mut p = SamplingParams {
            seed: 7,
            ..Default::default()
        };
        f(&mut p);
        p
    };
    let settings: [(&str, SamplingParams); 7] = [
        ("greedy", p(&|_| {})),
        (
            "T 0.8, top_p 0.95",
            p(&|p| (p.temperature, p.top_p) = (0.8, 0.95)),
        ),
        ("T 1.0", p(&|p| p.temperature = 1.0)),
        (
            "T 0.8, top_k 40",
            p(&|p| (p.temperature, p.top_k) = (0.8, 40)),
        ),
        (
            "T 0.8, min_p 0.05",
            p(&|p| (p.temperature, p.min_p) = (0.8, 0.05)),
        ),
        (
            "T 0.8, top_p 0.95, penalties",
            p(&|p| {
                (p.temperature, p.top_p) = (0.8, 0.95);
                (p.presence_penalty, p.frequency_penalty) = (0.5, 0.5);
                p.repetition_penalty = 1.1;
            }),
        ),
        (
            "T 0.8, top_p 0.95, 5 logprobs",
            p(&|p| (p.temperature, p.top_p) = (0.8, 0.95)),
        ),
    ];
    println!("vocabulary {}, {n} rows", s.vocab);
    println!("| setting | us/row |");
    println!("|---|---:|");
    let reps = 20;
    for (name, params) in &settings {
        let top = name.contains("logprobs").then_some(5);
        let t = Instant::now();
        for step in 0..reps {
            for row in logits.chunks(s.vocab) {
                black_box(sample(row, params, &history, step, top));
            }
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / (reps as usize * n) as f64;
        println!("| {name} | {us:.1} |");
    }
    let t = Instant::now();
    for _ in 0..reps {
        for row in logits.chunks(s.vocab) {
            black_box(scores(row, 0, 0));
        }
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / (reps as usize * n) as f64;
    println!("| the log-probability alone (added to a row when asked for) | {us:.1} |");
}
