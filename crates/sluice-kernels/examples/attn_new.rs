use half::f16;
use sluice_kernels::{Attn, attend_rows, noise, rows_per_tile};
use std::time::Instant;

fn spc(mut f: impl FnMut()) -> f64 {
    (0..7)
        .map(|_| {
            let s = Instant::now();
            let mut n = 0u32;
            while s.elapsed().as_secs_f64() < 0.1 {
                f();
                n += 1;
            }
            s.elapsed().as_secs_f64() / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let context = 2048;
    let halves = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
    for (hd, g, window) in [
        (64usize, 3usize, None),
        (256, 4, None),
        (256, 4, Some(512usize)),
    ] {
        let paged = std::env::var("PAGED").is_ok();
        let heads = if paged { 3 } else { 1 };
        let blocks = context / 16;
        let table: Vec<u32> = (0..blocks)
            .map(|b| {
                if paged {
                    (b * 37 % blocks) as u32
                } else {
                    b as u32
                }
            })
            .collect();
        let keys = halves(noise(heads * hd * context, 2));
        let values = halves(noise(heads * context * hd, 3));
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
                        table: &table,
                        block_stride: heads * hd * 16,
                        len,
                        scale: 0.125,
                        start: window.map_or(0, |w| len.saturating_sub(w)),
                        softcap: None,
                    }
                })
                .collect();
            let (mut out, mut scores) = (vec![0f32; rows * g * hd], Vec::new());
            let per = spc(|| attend_rows(&tile, &mut scores, &mut out));
            println!("{hd}x{g} {window:?} rows {rows}: {:.2} us", per * 1e6);
        }
    }
}
