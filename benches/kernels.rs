//! Speed of the matmul kernels on the weight matrices of a real GGUF file, one figure per
//! (tensor type, shape): microseconds per call and effective weight bandwidth at one
//! activation row (decode) and integer throughput at 64 rows (prefill).
//!
//! `cargo bench --bench kernels` (the default model), or `SLUICE_MODEL=FILE.gguf`.
//! `SLUICE_BENCH_ROWS=1,8,64` picks the activation rows. Only the first tensor of each
//! (type, shape) is timed. First it prints the machine's read bandwidth with every compute
//! thread, which bounds every single-row (decode) figure.

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
    let path = std::env::var_os("SLUICE_MODEL")
        .map(Into::into)
        .unwrap_or_else(sluice::config::default_model_path);
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
        rayon::current_num_threads()
    );
    println!(
        "memory read (the ceiling of one-row matmuls): {:.1} GB/s",
        read_bandwidth()
    );
    println!("| tensor | type | rows x cols | n | us/call | weight GB/s | GMAC/s |");
    println!("|---|---|---|---:|---:|---:|---:|");
    for ((ty, out, cols), (name, dtype, bytes)) in seen {
        let lin = QLinear::new(dtype, bytes, out, cols).expect("a matrix");
        for &n in &rows {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 0.5)
                .collect();
            let mut y = vec![0f32; n * out];
            let input = Input::new(&x, n);
            lin.matmul_input(&input, &mut y);
            // The best of five 0.1 s runs: this figure is about the kernel, not the host's
            // noise.
            let per = (0..5)
                .map(|_| {
                    let start = Instant::now();
                    let mut calls = 0u32;
                    while start.elapsed().as_secs_f64() < 0.1 {
                        lin.matmul_input(&input, &mut y);
                        calls += 1;
                    }
                    start.elapsed().as_secs_f64() / calls as f64
                })
                .fold(f64::INFINITY, f64::min);
            println!(
                "| {name} | {ty} | {out} x {cols} | {n} | {:.1} | {:.1} | {:.1} |",
                per * 1e6,
                bytes.len() as f64 / per / 1e9,
                (n * out * cols) as f64 / per / 1e9
            );
        }
    }
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
