//! Fetching ahead (the next matrix by idle compute threads, a decode row's keys and values
//! before its attention: `crates/sluice-kernels/src/ahead.rs`) changes no number: the
//! default model's decode logits are bit for bit the same with it on and off. Nor does
//! the GFNI nibble split of the AVX-512 matmul (`crates/sluice-kernels/src/x86/avx512`), nor
//! the number of compute threads (`sluice generate` run with 1 to 4).

mod common;

use sluice::engine::GgufFile;
use sluice::engine::testing::{KvSlab, TokenRow, load_model};

/// Logits of 12 decode steps after a 20-token prompt, one row at a time.
fn decode_logits(m: &dyn sluice::engine::testing::Model) -> Vec<Vec<f32>> {
    let s = m.shape().clone();
    let mut kv = KvSlab::contiguous(s.n_layers, s.n_kv_heads, s.head_dim, 1, 64);
    let prompt: Vec<TokenRow> = (0..20)
        .map(|pos| TokenRow {
            token: 300 + 17 * pos as u32,
            slot: 0,
            pos,
        })
        .collect();
    m.forward(&mut kv, &prompt, &[19]);
    (20..32)
        .map(|pos| {
            let row = TokenRow {
                token: 1000 + pos as u32,
                slot: 0,
                pos,
            };
            m.forward(&mut kv, &[row], &[0])
        })
        .collect()
}

#[test]
fn decode_is_the_same_with_and_without_fetching_ahead() {
    let file = GgufFile::open(&common::model_path()).expect("the default model");
    let m = load_model(&file).expect("it loads");
    sluice_kernels::set_fetch_ahead(false);
    let without = decode_logits(&*m);
    sluice_kernels::set_fetch_ahead(true);
    let with = decode_logits(&*m);
    assert_eq!(with.len(), 12);
    for (a, b) in with.iter().zip(&without) {
        assert!(!a.is_empty() && a.iter().all(|v| v.is_finite()));
        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "logits differ with fetching ahead");
    }
}

/// The default model is Q4_1 (a nibble format): its decode and prompt logits are the same
/// bits whether the AVX-512 matmul splits nibbles with GFNI or with a shift and a mask.
/// Reported as skipped where the CPU has no AVX-512 with GFNI (there is one way only).
#[test]
#[cfg_attr(not(cpu_gfni), ignore = "this CPU lacks AVX-512 with GFNI")]
fn decode_is_the_same_with_and_without_the_gfni_nibble_split() {
    assert!(
        sluice_kernels::set_gfni(true),
        "built for GFNI, but this CPU lacks it"
    );
    let file = GgufFile::open(&common::model_path()).expect("the default model");
    let m = load_model(&file).expect("it loads");
    sluice_kernels::set_gfni(false);
    let without = decode_logits(&*m);
    sluice_kernels::set_gfni(true);
    let with = decode_logits(&*m);
    for (a, b) in with.iter().zip(&without) {
        assert!(!a.is_empty() && a.iter().all(|v| v.is_finite()));
        let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "logits differ with the GFNI nibble split");
    }
}

/// `sluice generate`'s greedy ids and log-probabilities (top 3) for `prompt` with `threads`
/// compute threads (`RAYON_NUM_THREADS`), as printed.
fn generated(model: &std::path::Path, prompt: &str, threads: usize) -> String {
    let model = model.display().to_string();
    let threads = threads.to_string();
    let (ok, out, err) = common::run_sluice(
        &[
            "generate",
            "--model",
            &model,
            "--prompt",
            prompt,
            "--max-tokens",
            "6",
            "--ignore-eos",
            "--logprobs",
            "3",
        ],
        &[("RAYON_NUM_THREADS", &threads)],
    );
    assert!(ok, "generate with {threads} threads: {err}");
    out
}

/// A prompt that reaches 76 tokens past the first cut of attention's parts
/// (`ATTN_PART`), so its last rows and every decode row cross it; and the model's KV head
/// count.
fn long_prompt(model: &std::path::Path) -> (String, usize) {
    let loaded = sluice::load_model(model, &Default::default())
        .unwrap_or_else(|e| panic!("{e:#}: run scripts/fetch-model gemma3 (and make model)"));
    let mut text = String::new();
    for i in 0.. {
        text.push_str(&format!("{} ", i * 37 % 1000));
        // Counted every 16 numbers only: encoding the whole text each time is quadratic.
        if i % 16 == 15
            && loaded.tokenizer.encode(&text).expect("it encodes").len()
                >= sluice_kernels::ATTN_PART + 76
        {
            break;
        }
    }
    (text, loaded.model.shape().n_kv_heads)
}

/// The same greedy ids and the same bits of every printed log-probability whatever the number of
/// compute threads: each matmul task writes its own outputs, and a long row's attention
/// parts merge to the row's bits however they are shared out. One thread splits nothing;
/// SmolLM2 (three KV heads) has its long decode rows cut into runs of parts with four
/// threads, Gemma 3 (one) with two and three. (Four threads on a 2-core machine is slow,
/// not wrong: the test asks for bits, not speed.)
#[test]
fn generation_is_the_same_whatever_the_compute_thread_count() {
    let gemma = sluice::config::default_model_path()
        .parent()
        .expect("model dir")
        .join("gemma-3-270m-q4_k_m.gguf");
    for (model, counts) in [
        (common::model_path(), &[1, 2, 3, 4][..]),
        (gemma, &[1, 2, 3][..]),
    ] {
        let (prompt, kv_heads) = long_prompt(&model);
        // Splitting needs more threads than KV heads (one decode row, one item a head).
        assert!(kv_heads < counts[counts.len() - 1], "{kv_heads} KV heads");
        let runs: Vec<String> = counts
            .iter()
            .map(|&t| generated(&model, &prompt, t))
            .collect();
        let v: serde_json::Value = serde_json::from_str(&runs[0]).expect("JSON");
        assert_eq!(v["greedy_ids"].as_array().map(Vec::len), Some(6), "{v}");
        for (t, run) in counts.iter().zip(&runs).skip(1) {
            assert_eq!(run, &runs[0], "{}: {t} threads against 1", model.display());
        }
    }
}
