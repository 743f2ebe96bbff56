//! Fetching ahead (the next matrix by idle compute threads, a decode row's keys and values
//! before its attention: `crates/sluice-kernels/src/ahead.rs`) changes no number: the
//! default model's decode logits are bit for bit the same with it on and off. Nor does
//! the GFNI nibble split of the AVX-512 matmul (`crates/sluice-kernels/src/x86/avx512`).

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
