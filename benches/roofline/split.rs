//! `SLUICE_BENCH_REGIONS=1` of the roofline bench: where a decode token's time goes in
//! each placement of the vCPUs. Each matmul stage's streaming rate in every paired window,
//! and the read rate of a token's bytes cut into as many parallel regions as a decode
//! token has, against the same bytes in one stream.

use std::time::Duration;

use candle_core::quantized::gguf_file;
use sluice_kernels::stages;

use crate::read;

/// The matmul stages of a decode token (`sluice_kernels::stages` names) and the bytes of
/// the model's weights each reads a token.
pub fn stage_bytes(content: &gguf_file::Content) -> Vec<(&'static str, f64)> {
    let tied = !content.tensor_infos.contains_key("output.weight");
    let stage = |name: &str| match name {
        n if [
            "attn_q.weight",
            "attn_k.weight",
            "attn_v.weight",
            "attn_qkv.weight",
        ]
        .iter()
        .any(|p| n.contains(p)) =>
        {
            Some("q, k, v")
        }
        n if n.contains("attn_output.weight") => Some("o"),
        n if n.contains("ffn_gate.weight") || n.contains("ffn_up.weight") => Some("gate, up"),
        n if n.contains("ffn_down.weight") => Some("down"),
        "output.weight" => Some("output head"),
        "token_embd.weight" if tied => Some("output head"),
        _ => None,
    };
    let mut bytes: Vec<(&'static str, f64)> = Vec::new();
    for (name, info) in &content.tensor_infos {
        let Some(s) = stage(name) else { continue };
        let b = crate::file::tensor_bytes(info);
        match bytes.iter_mut().find(|(n, _)| *n == s) {
            Some((_, total)) => *total += b,
            None => bytes.push((s, b)),
        }
    }
    // In a token's order, whatever order the file's tensors came in.
    let order = ["q, k, v", "o", "gate, up", "down", "output head"];
    bytes.sort_by_key(|(n, _)| order.iter().position(|o| o == n));
    bytes
}

/// One paired window's decode and read rates (GB/s) with the rate at which each matmul
/// stage streamed its weights in it (its bytes a token over its time a token, the time of
/// quantising its input and handing out its region included), and the share of the
/// staged time spent outside the matmul stages (stderr).
pub fn print_stage_rates(
    w: (f64, f64, f64),
    matrices: &[(&str, f64)],
    st: &[(&str, Duration, u64)],
) {
    let find = |name: &str| st.iter().find(|(n, ..)| *n == name);
    let tokens = find("output head").map_or(0, |s| s.2).max(1) as f64;
    let rates: Vec<String> = matrices
        .iter()
        .filter_map(|&(name, bytes)| {
            let (_, took, _) = find(name)?;
            Some(format!(
                "{name} {:.1}",
                bytes * tokens / took.as_secs_f64() / 1e9
            ))
        })
        .collect();
    let staged: f64 = st
        .iter()
        .filter(|(n, ..)| *n != stages::REGIONS)
        .map(|(_, d, _)| d.as_secs_f64())
        .sum();
    let matmuls: f64 = matrices
        .iter()
        .filter_map(|(name, _)| find(name).map(|s| s.1.as_secs_f64()))
        .sum();
    eprintln!(
        "window decode/read GB/s@crossing {:.1}/{:.1}@{:.0}ns; matmuls streamed GB/s: {}; \
         other stages {:.0}% of the staged time",
        w.0 / 1e9,
        w.1 / 1e9,
        w.2,
        rates.join(", "),
        100.0 * (staged - matmuls) / staged.max(f64::MIN_POSITIVE)
    );
}

/// The parallel regions of matmuls in one decode token of the model: q/k/v, o, gate/up
/// and down in each layer, and the output head.
pub fn regions(content: &gguf_file::Content) -> usize {
    let layers =
        crate::file::arch_u32(content, "block_count").expect("the model's block count") as usize;
    4 * layers + 1
}

/// `SLUICE_BENCH_REGIONS=1`: rounds of the read rate of a token's bytes in one stream
/// ([`read::window_rate`]) beside the same bytes cut into the token's `regions`
/// ([`read::regions_rate`]: plainly, asking 8 KB ahead, and each thread asking for the
/// start of its share of the next region; [`read::barrier_rate`]: as phases of one
/// region) and, plainly, into three regions a layer and two, with the line crossing
/// time that tells where the vCPUs are (stderr). What the region structure alone costs
/// in each placement.
pub fn cut_reads(buf: &[u64], regions: usize) {
    for _ in 0..8 {
        let cross = read::crossing_ns();
        let whole = read::window_rate(buf);
        let plain = read::regions_rate(buf, regions, false, false);
        let ahead = read::regions_rate(buf, regions, true, false);
        let next = read::regions_rate(buf, regions, false, true);
        let both = read::regions_rate(buf, regions, true, true);
        let barrier = read::barrier_rate(buf, regions);
        // Three a layer (as if the gated block were one region) and two (the fewest for a
        // layer with two threads and no work done twice: its attention needs all of q, k
        // and v, and its gated block all of the attention's output): what fewer meetings
        // could give back.
        let fewer: Vec<String> = [3 * (regions - 1) / 4 + 1, (regions - 1) / 2 + 1]
            .iter()
            .map(|&n| {
                format!(
                    "{:.1} in {n}",
                    read::regions_rate(buf, n, false, false) / 1e9
                )
            })
            .collect();
        eprintln!(
            "read GB/s@crossing: {:.1}@{cross:.0}ns in one stream; in {regions} regions: \
             {:.1} plain, {:.1} 8 KB ahead, {:.1} asking for the next region's start, \
             {:.1} both; in {regions} phases of one region with a barrier: {:.1}",
            whole / 1e9,
            plain / 1e9,
            ahead / 1e9,
            next / 1e9,
            both / 1e9,
            barrier / 1e9
        );
        eprintln!("  the same, plain, in fewer regions: {}", fewer.join(", "));
    }
}
