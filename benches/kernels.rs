//! Speed of the matmul kernels on the weight matrices of a real GGUF file, one figure per
//! (tensor type, shape): microseconds per call and effective weight bandwidth at one
//! activation row (decode) and integer throughput at 64 rows (prefill).
//!
//! `cargo bench --bench kernels` (the default model), or `SLUICE_MODEL=FILE.gguf`.
//! `SLUICE_BENCH_ROWS=1,8,64` picks the activation rows, `SLUICE_BENCH_FORMATS=Q5_0,Q4K`
//! the tensor types (as the table names them). Only the first tensor of each
//! (type, shape) is timed. First it prints ceilings measured with every compute thread: the
//! machine's read bandwidth, which bounds every single-row (decode) figure, and on x86 the
//! rate of AVX2's cheapest int8 multiply-add, which bounds every many-row figure below
//! AVX-512 VNNI, alone and with the float epilogue that scales every block of 32 weights.
//! Last, decode attention of one query group for two head shapes, from L1, decode and
//! prompt-tile attention over a long context (`attend_rows`), and a whole 32-stream step's
//! decode attention over a KV slab, from memory, on 4 KB and on huge pages
//! (`--kv-huge-pages`). `SLUICE_BENCH_ONLY=attention` runs only the attention tables (no
//! model file needed); `SLUICE_BENCH_ONLY=threads` what it costs the compute threads to
//! start and join a parallel region (`kernels/sync.rs`).

#[path = "kernels/sync.rs"]
mod sync;

use std::collections::BTreeMap;
use std::time::Instant;

use sluice::engine::GgufFile;
use sluice_kernels::{Input, QLinear};

fn main() {
    // The engine calls the kernels from inside its compute pool; so does this bench.
    let pool = rayon::ThreadPoolBuilder::new()
        .build()
        .expect("a thread pool");
    pool.install(run);
}

fn run() {
    let only = std::env::var("SLUICE_BENCH_ONLY").ok();
    if only.as_deref() == Some("threads") {
        return sync::table();
    }
    if only.as_deref() == Some("attention") {
        attention_table();
        attention_rows_table();
        slab_attention_table();
        return;
    }
    let path = std::env::var_os("SLUICE_MODEL")
        .map(Into::into)
        .unwrap_or_else(sluice::config::default_model_path);
    if only.as_deref() == Some("sweep") {
        return sweep(&path);
    }
    let rows: Vec<usize> = std::env::var("SLUICE_BENCH_ROWS")
        .unwrap_or_else(|_| "1,64".into())
        .split(',')
        .map(|s| s.trim().parse().expect("a row count"))
        .collect();
    let file = GgufFile::open(&path).expect("a GGUF file");
    let mut names: Vec<&String> = file.content.tensor_infos.keys().collect();
    names.sort();
    let mut seen = BTreeMap::new();
    for name in names {
        let (dtype, shape, bytes) = file.tensor(name).expect("a tensor");
        if shape.len() != 2 {
            continue;
        }
        let (out, cols) = (shape[0], shape[1]);
        seen.entry((format!("{dtype:?}"), out, cols))
            .or_insert((name.clone(), dtype, bytes));
    }
    println!(
        "{}: kernel level {:?}, threads {}",
        path.display(),
        sluice_kernels::Simd::current(),
        sluice_kernels::threads::threads()
    );
    println!(
        "memory read (the ceiling of one-row matmuls): {:.1} GB/s",
        read_bandwidth()
    );
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        println!(
            "AVX2 int8 multiply-add (the ceiling of many-row matmuls without VNNI): {:.1} GMAC/s",
            int8_ceiling(maddubs_loop)
        );
        println!(
            "the same with a float epilogue per 32 weights (a format's scales): {:.1} GMAC/s",
            int8_ceiling(epilogue_loop)
        );
    }
    println!("| tensor | type | rows x cols | n | us/call | weight GB/s | GMAC/s |");
    println!("|---|---|---|---:|---:|---:|---:|");
    let formats = formats();
    for ((ty, out, cols), (name, dtype, bytes)) in seen {
        if formats.as_ref().is_some_and(|f| !f.contains(&ty)) {
            continue;
        }
        let lin = QLinear::new(dtype, bytes, out, cols).expect("a matrix");
        for &n in &rows {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 0.5)
                .collect();
            let mut y = vec![0f32; n * out];
            let input = Input::new(&x, n);
            lin.matmul_input(&input, &mut y);
            let per = seconds_per_call(|| lin.matmul_input(&input, &mut y));
            println!(
                "| {name} | {ty} | {out} x {cols} | {n} | {:.1} | {:.1} | {:.1} |",
                per * 1e6,
                bytes.len() as f64 / per / 1e9,
                (n * out * cols) as f64 / per / 1e9
            );
        }
    }
    attention_table();
    attention_rows_table();
    slab_attention_table();
}

/// The matmuls of one decode token and nothing else: every 2-D tensor of the file (the
/// layers in order, then the output head), one activation row each, swept again and again
/// so that every sweep reads the weights from memory. Its GB/s against the read bandwidth
/// measured right before and after says how much of a decode step's distance from the
/// roofline is in the matmuls and how much outside them (`benches/roofline.rs` has the
/// whole step). `SLUICE_BENCH_ONLY=sweep`, `SLUICE_BENCH_ROUNDS` rounds (default 5),
/// `SLUICE_BENCH_FORMATS` to sweep only some tensor types.
fn sweep(path: &std::path::Path) {
    let file = GgufFile::open(path).expect("a GGUF file");
    let mut names: Vec<&String> = file.content.tensor_infos.keys().collect();
    // Layers in numeric order, then the rest (the head).
    let key = |n: &str| -> (usize, String) {
        let layer = n
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|l| l.parse().ok())
            .unwrap_or(usize::MAX);
        (layer, n.to_string())
    };
    names.sort_by_key(|n| key(n));
    let mut mats = Vec::new();
    let mut bytes_total = 0usize;
    let formats = formats();
    for name in names {
        let (dtype, shape, bytes) = file.tensor(name).expect("a tensor");
        if shape.len() != 2
            || formats
                .as_ref()
                .is_some_and(|f| !f.contains(&format!("{dtype:?}")))
        {
            continue;
        }
        if let Ok(lin) = QLinear::new(dtype, bytes, shape[0], shape[1]) {
            bytes_total += bytes.len();
            mats.push((lin, shape[1], shape[0]));
        }
    }
    if mats.is_empty() {
        eprintln!(
            "no matrix of the types SLUICE_BENCH_FORMATS names \
             (as the tables name them: Q4K, Q8_0, ...)"
        );
        return;
    }
    let x: Vec<Vec<f32>> = mats
        .iter()
        .map(|(_, cols, _)| {
            (0..*cols)
                .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 0.5)
                .collect()
        })
        .collect();
    let mut y: Vec<Vec<f32>> = mats.iter().map(|(_, _, rows)| vec![0f32; *rows]).collect();
    let mut run = || {
        for ((lin, _, _), (x, y)) in mats.iter().zip(x.iter().zip(y.iter_mut())) {
            lin.matmul_input(&Input::new(x, 1), y);
        }
    };
    run();
    println!(
        "{}: kernel level {:?}, threads {}, {} matrices, {:.1} MB",
        path.display(),
        sluice_kernels::Simd::current(),
        sluice_kernels::threads::threads(),
        mats.len(),
        bytes_total as f64 / 1e6
    );
    println!(
        "| round | read GB/s before | sweep ms | sweep GB/s | read GB/s after | of the higher |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    let rounds: usize = std::env::var("SLUICE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    for round in 0..rounds {
        let before = read_bandwidth();
        let per = seconds_per_call(&mut run);
        let after = read_bandwidth();
        let gbs = bytes_total as f64 / per / 1e9;
        println!(
            "| {round} | {before:.1} | {:.3} | {gbs:.1} | {after:.1} | {:.0}% |",
            per * 1e3,
            100.0 * gbs / before.max(after)
        );
    }
}

/// `SLUICE_BENCH_FORMATS=Q5_0,Q4K`: only those tensor types (as the tables name them).
fn formats() -> Option<Vec<String>> {
    std::env::var("SLUICE_BENCH_FORMATS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect())
}

/// Decode attention as a step of 32 streams meets it: every layer's query groups of 32
/// slots over their live positions in a real KV pool (read through the block tables), on
/// the compute threads, so the keys and values come from memory (the pool is far larger
/// than any cache), not from L1 as in
/// `attention_table`. Milliseconds per step for two model shapes.
fn slab_attention_table() {
    use sluice::engine::testing::KvSlab;
    use sluice_kernels::{attend_group, noise};
    println!(
        "| slab attention (layers x slots x kv heads, hd x g) | pages | positions | ms/step | GMAC/s |"
    );
    println!("|---|---|---:|---:|---:|");
    let slots = 32;
    // Each shape on ordinary pages and with `--kv-huge-pages`' advice.
    for (layers, kvh, hd, g) in [(30usize, 3usize, 64usize, 3usize), (18, 1, 256, 4)] {
        for huge in [false, true] {
            let mut kv = KvSlab::contiguous(layers, kvh, hd, slots, 1024);
            if huge {
                kv.advise_huge_pages();
            }
            let (k, v) = (noise(kvh * hd, 2), noise(kvh * hd, 3));
            let q = noise(g * kvh * hd, 1);
            let len = 192;
            for layer in 0..layers {
                for slot in 0..slots {
                    for pos in 0..len {
                        kv.write(layer, slot, pos, &k, &v);
                    }
                }
            }
            let step = || {
                for layer in 0..layers {
                    let kv = &kv;
                    let q = &q;
                    sluice_kernels::threads::for_each(slots * kvh, |i| {
                        let (slot, h) = (i / kvh, i % kvh);
                        let q = &q[h * g * hd..(h + 1) * g * hd];
                        let a = kv
                            .read(layer, slot, h, len)
                            .attn(q, hd, len, 0.125, None, None);
                        let mut out = vec![0f32; g * hd];
                        attend_group(&a, &mut Vec::new(), &mut out);
                        std::hint::black_box(&out);
                    });
                }
            };
            let per = seconds_per_call(step);
            println!(
                "| {layers} x {slots} x {kvh}, {hd} x {g} | {} | {len} | {:.2} | {:.1} |",
                if huge { "huge" } else { "4 KB" },
                per * 1e3,
                (2 * layers * slots * kvh * g * hd * len) as f64 / per / 1e9
            );
        }
    }
}

/// Decode attention: one query group (one row's heads sharing a KV head) over `len` f16
/// keys and values, on one thread, for the head shapes of SmolLM2 (64 x 3) and Gemma 3
/// (256 x 4). Multiply-adds counted: scores and weighted sums, `2 · g · hd · len`.
fn attention_table() {
    use half::f16;
    use sluice_kernels::{Attn, attend_group, noise};
    println!("| attention (hd x heads) | positions | us/call | GMAC/s |");
    println!("|---|---:|---:|---:|");
    let stride = 8192;
    let halves = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
    for (hd, g) in [(64usize, 3usize), (256, 4)] {
        let q = noise(g * hd, 1);
        let keys = halves(noise(hd * stride, 2));
        let values = halves(noise(stride * hd, 3));
        let table: Vec<u32> = (0..(stride / 16) as u32).collect();
        for len in [300usize, 1000, 4000, 8000] {
            let a = Attn {
                q: &q,
                hd,
                keys: &keys,
                values: &values,
                table: &table,
                block_stride: hd * 16,
                len,
                scale: 0.125,
                start: 0,
                softcap: None,
            };
            let (mut out, mut scores) = (vec![0f32; g * hd], Vec::new());
            let per = seconds_per_call(|| attend_group(&a, &mut scores, &mut out));
            println!(
                "| {hd} x {g} | {len} | {:.2} | {:.1} |",
                per * 1e6,
                (2 * g * hd * len) as f64 / per / 1e9
            );
        }
    }
}

/// Attention of one KV head over a long context (2,048 positions) through `attend_rows`, on
/// one thread: a decode step (one row, the last position) and a prompt tile (as many
/// consecutive rows as `rows_per_tile` gives, ending at the context), for the head shapes of
/// SmolLM2 (64 x 3) and Gemma 3 (256 x 4, also with its 512-position window). Each twice:
/// keys and values contiguous (the identity block table), and paged as a KV pool lays them
/// out (blocks of 3 KV heads interleaved, `paged`), the sequence's blocks in shuffled
/// order. Multiply-adds counted: scores and weighted sums of every row over its own
/// positions.
fn attention_rows_table() {
    use half::f16;
    use sluice_kernels::{Attn, attend_rows, noise, rows_per_tile};
    println!("| attention rows (hd x heads, window) | positions | rows | us/call | GMAC/s |");
    println!("|---|---:|---:|---:|---:|");
    let context = 2048;
    let blocks = context / 16;
    let halves = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
    // A fixed shuffle of the blocks: block b at pool block (b * 37) mod blocks.
    let shuffled: Vec<u32> = (0..blocks).map(|b| (b * 37 % blocks) as u32).collect();
    let identity: Vec<u32> = (0..blocks as u32).collect();
    for paged in [false, true] {
        for (hd, g, window) in [
            (64usize, 3usize, None),
            (256, 4, None),
            (256, 4, Some(512usize)),
        ] {
            let heads = if paged { 3 } else { 1 };
            let block_stride = heads * hd * 16;
            let keys = halves(noise(blocks * block_stride, 2));
            let values = halves(noise(blocks * block_stride, 3));
            let table = if paged { &shuffled } else { &identity };
            for rows in [1, rows_per_tile(g)] {
                let q = noise(rows * g * hd, 1);
                let tile: Vec<Attn> = (0..rows)
                    .map(|r| {
                        let len = context - rows + 1 + r;
                        Attn {
                            q: &q[r * g * hd..(r + 1) * g * hd],
                            hd,
                            keys: &keys,
                            values: &values,
                            table,
                            block_stride,
                            len,
                            scale: 0.125,
                            start: window.map_or(0, |w| len.saturating_sub(w)),
                            softcap: None,
                        }
                    })
                    .collect();
                let macs: usize = tile.iter().map(|a| 2 * g * hd * (a.len - a.start)).sum();
                let (mut out, mut scores) = (vec![0f32; rows * g * hd], Vec::new());
                let per = seconds_per_call(|| attend_rows(&tile, &mut scores, &mut out));
                let w = window.map_or(String::new(), |w| format!(", {w}"));
                let layout = if paged { ", paged" } else { "" };
                println!(
                    "| {hd} x {g}{w}{layout} | {context} | {rows} | {:.2} | {:.1} |",
                    per * 1e6,
                    macs as f64 / per / 1e9
                );
            }
        }
    }
}

/// Seconds per call of `f`: the best of five 0.1 s runs, so that the figure is about the
/// kernel, not the host's noise.
fn seconds_per_call(mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            let mut calls = 0u32;
            while start.elapsed().as_secs_f64() < 0.1 {
                f();
                calls += 1;
            }
            start.elapsed().as_secs_f64() / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// GB/s of summing a 256 MB buffer on every compute thread (best of 5).
fn read_bandwidth() -> f64 {
    use rayon::prelude::*;
    let buf = vec![1u64; 32 << 20];
    (0..5)
        .map(|_| {
            let start = Instant::now();
            let sum: u64 = buf
                .par_chunks(1 << 16)
                .map(|c| c.iter().fold(0u64, |a, &x| a.wrapping_add(x)))
                .reduce(|| 0, u64::wrapping_add);
            std::hint::black_box(sum);
            (buf.len() * 8) as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// GMAC/s of `body` (`maddubs_loop` or `epilogue_loop`, 192 products per iteration) on
/// every compute thread (best of 5).
#[cfg(target_arch = "x86_64")]
fn int8_ceiling(body: unsafe fn(usize, i8) -> i64) -> f64 {
    use rayon::prelude::*;
    const ITERS: usize = 10_000_000;
    let threads = rayon::current_num_threads();
    (0..5)
        .map(|_| {
            let start = Instant::now();
            let sum: i64 = (0..threads)
                .into_par_iter()
                .with_max_len(1)
                // SAFETY: the caller checked that the CPU has AVX2.
                .map(|t| unsafe { body(ITERS, t as i8) })
                .sum();
            std::hint::black_box(sum);
            (threads * ITERS * 6 * 32) as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .fold(0.0, f64::max)
}

/// `vpmaddubsw` (32 int8 products summed in pairs) plus `vpaddw` into one of six
/// accumulators, operands in registers. An AVX2 int8 matmul needs at least these two
/// instructions per 32 products (without VNNI there is no multiply that accumulates), so no
/// many-row figure can pass this.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn maddubs_loop(iters: usize, seed: i8) -> i64 {
    use std::arch::x86_64::*;
    let mut w = _mm256_set1_epi8(3 + seed);
    let x: [__m256i; 6] = std::array::from_fn(|k| _mm256_set1_epi8(k as i8 - 3));
    let mut acc = [_mm256_setzero_si256(); 6];
    for _ in 0..iters {
        // SAFETY: an empty instruction; it hides `w` from the optimiser so that the
        // products are computed on every pass instead of once.
        unsafe { std::arch::asm!("/* {0} */", inout(ymm_reg) w, options(nomem, nostack)) };
        for k in 0..6 {
            acc[k] = _mm256_add_epi16(acc[k], _mm256_maddubs_epi16(w, x[k]));
        }
    }
    let mut lanes = [0i16; 16];
    let mut total = 0i64;
    for a in acc {
        // SAFETY: `lanes` holds 32 bytes.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, a) };
        total += lanes.iter().map(|&v| v as i64).sum::<i64>();
    }
    total
}

/// As `maddubs_loop`, shaped like a kernel's tile: each pass takes 8 chunks of weights
/// (one block of 32 columns for 8 rows) from memory and, for 4 activation rows, broadcasts
/// 4 activation bytes per chunk, sums the products in 16 bits in two runs of 4 chunks,
/// widens them (`vpmaddwd`) and applies the block's float epilogue: convert, scale by the
/// weights' and the activations' scales, and add the offset term (two multiply-adds).
/// Returns the accumulators' sum so that nothing is optimised away.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn epilogue_loop(iters: usize, seed: i8) -> i64 {
    use std::arch::x86_64::*;
    const ROWS: usize = 4;
    let weights = [3u8.wrapping_add(seed as u8); 8 * 64];
    let acts = [1i32; ROWS * 8];
    let scales = [0.5f32; 16 + 2 * ROWS];
    let (mut q, mut x, mut d) = (weights.as_ptr(), acts.as_ptr(), scales.as_ptr());
    let mut acc = [_mm256_setzero_ps(); ROWS];
    let ones = _mm256_set1_epi16(1);
    // 1,024 products a pass: as many in all as `maddubs_loop`'s 192 per iteration.
    for _ in 0..iters * 3 / 16 {
        // SAFETY: an empty instruction; it hides the pointers from the optimiser so that
        // every pass loads and computes.
        unsafe {
            std::arch::asm!("/* {0} {1} {2} */", inout(reg) q, inout(reg) x, inout(reg) d,
                options(readonly, nostack))
        };
        // SAFETY: every read is inside the arrays above.
        unsafe {
            let w: [__m256i; 8] =
                std::array::from_fn(|c| _mm256_loadu_si256(q.add(64 * c) as *const __m256i));
            let (dw, mw) = (_mm256_loadu_ps(d), _mm256_loadu_ps(d.add(8)));
            for (k, acc) in acc.iter_mut().enumerate() {
                let mut isum = _mm256_setzero_si256();
                for run in 0..2 {
                    let mut part = _mm256_setzero_si256();
                    for (c, w) in w.iter().enumerate().skip(4 * run).take(4) {
                        let xc = _mm256_set1_epi32(x.add(8 * k + c).read());
                        part = _mm256_add_epi16(part, _mm256_maddubs_epi16(*w, xc));
                    }
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(part, ones));
                }
                let da = _mm256_set1_ps(d.add(16 + k).read());
                let sum = _mm256_set1_ps(d.add(16 + ROWS + k).read());
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, da), *acc);
                *acc = _mm256_fmadd_ps(mw, sum, *acc);
            }
        }
    }
    let mut lanes = [0f32; 8];
    let mut total = 0i64;
    for a in acc {
        // SAFETY: `lanes` holds 32 bytes.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), a) };
        total += lanes.iter().map(|&v| v as i64).sum::<i64>();
    }
    total
}
