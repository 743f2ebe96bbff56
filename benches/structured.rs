//! Constrained decoding under load: `cargo bench --bench structured`.
//!
//! 8 concurrent chat requests (128 new tokens at most, sampled at temperature 0.7)
//! through the engine, once unconstrained and once held to a nested JSON Schema, with
//! fresh prompts per run; prints each run's aggregate tokens/s, their ratio, and the
//! grammar-mask time per decode step (p50/p99 from `sluice_grammar_mask_duration_seconds`'s
//! buckets: upper bounds). `SLUICE_MODEL` picks the model, `SLUICE_BENCH_STREAMS` the
//! concurrency.

use std::sync::Arc;
use std::time::Instant;

use sluice::engine::{EngineConfig, EngineHandle, Event, GrammarSpec, Grammars, ValidRequest};
use sluice::tokenizer::{ChatMessage, Tokenizer};

fn schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 40},
            "people": {"type": "array", "maxItems": 6, "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 20},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "role": {"enum": ["admin", "user", "guest"]},
                    "city": {"type": "object", "properties": {
                        "name": {"type": "string", "maxLength": 20},
                        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                    }, "required": ["name", "zip"], "additionalProperties": false}
                },
                "required": ["name", "age", "role", "city"],
                "additionalProperties": false
            }}
        },
        "required": ["title", "people"],
        "additionalProperties": false
    })
}

fn prompt(tok: &Tokenizer, run: usize, i: usize) -> Vec<u32> {
    let text = tok
        .apply_chat_template(&[ChatMessage::text(
            "user",
            &format!(
                "Run {run}, team {i}: list the people of a small team with their cities, as JSON."
            ),
        )])
        .expect("chat template");
    tok.encode(&text).expect("encode")
}

/// Aggregate tokens/s of `n` concurrent requests, and their mean length.
async fn run(
    eng: &EngineHandle,
    tok: &Tokenizer,
    n: usize,
    run: usize,
    g: Option<&Grammars>,
) -> (f64, f64) {
    let c = g.map(|g| {
        g.compile(&GrammarSpec::JsonSchema(schema()))
            .expect("schema compiles")
    });
    let start = Instant::now();
    let streams: Vec<_> = (0..n)
        .map(|i| {
            let mut r = ValidRequest::greedy(prompt(tok, run, i), 128);
            r.params.temperature = 0.7;
            r.params.seed = (run * 100 + i) as u64;
            r.stop_ids = tok.end_ids.clone();
            r.constraint = c.clone();
            eng.submit(r).expect("submit")
        })
        .collect();
    let counts = futures::future::join_all(streams.into_iter().map(|mut rx| async move {
        let mut count = 0usize;
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Token(_) => count += 1,
                Event::Done(_) => break,
                Event::Error(e) => panic!("{e}"),
                Event::Prompt(_) | Event::Beams(_) => {}
            }
        }
        count
    }))
    .await;
    let total = counts.iter().sum::<usize>() as f64;
    (total / start.elapsed().as_secs_f64(), total / n as f64)
}

/// The upper bound of the bucket holding quantile `q` of a histogram.
fn quantile(h: &prometheus::Histogram, q: f64) -> f64 {
    let m = prometheus::core::Collector::collect(h);
    let hist = m[0].get_metric()[0].get_histogram();
    let total = hist.get_sample_count() as f64;
    for b in hist.get_bucket() {
        if b.cumulative_count() as f64 >= q * total {
            return b.upper_bound();
        }
    }
    f64::INFINITY
}

fn main() {
    let path = std::env::var_os("SLUICE_MODEL")
        .map(Into::into)
        .unwrap_or_else(sluice::config::default_model_path);
    let n: usize = std::env::var("SLUICE_BENCH_STREAMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let loaded =
        sluice::load_model(&path, &Default::default()).expect("run scripts/fetch-model first");
    let tok = Arc::new(loaded.tokenizer);
    let t = Instant::now();
    let grammars = Grammars::new(tok.clone()).expect("grammar compiler");
    println!(
        "{}: grammar compiler built in {:.0} ms",
        path.display(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let cfg = EngineConfig {
        slots: n.max(8),
        context: 1024,
        ..Default::default()
    };
    let eng = EngineHandle::start(loaded.model, tok.clone(), cfg);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(run(&eng, &tok, n, 0, None)); // warm-up
    let (mut free, mut held) = (Vec::new(), Vec::new());
    let (mut free_len, mut held_len) = (0.0, 0.0);
    for r in 1..=3 {
        let (t, l) = rt.block_on(run(&eng, &tok, n, 2 * r, None));
        free.push(t);
        free_len += l / 3.0;
        let (t, l) = rt.block_on(run(&eng, &tok, n, 2 * r + 1, Some(&grammars)));
        held.push(t);
        held_len += l / 3.0;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (f, h) = (mean(&free), mean(&held));
    println!(
        "{n} streams, unconstrained:      {f:7.1} tok/s (runs {free:.1?}), {free_len:.0} tokens per request"
    );
    println!(
        "{n} streams, nested json_schema: {h:7.1} tok/s (runs {held:.1?}), {held_len:.0} tokens per request"
    );
    println!("constrained / unconstrained: {:.2}x", h / f);
    let mask = &eng.metrics().mask_time;
    println!(
        "grammar masks per step: {} steps, p50 <= {:.1} ms, p99 <= {:.1} ms",
        mask.get_sample_count(),
        quantile(mask, 0.5) * 1e3,
        quantile(mask, 0.99) * 1e3
    );
}
