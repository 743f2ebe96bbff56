//! The forward pass over a list of (slot, position, token) rows.
//!
//! Prefill and decode are the same computation: prefill passes every real token of the
//! prompts (padding is never computed, so it can never become a key, E7), decode passes
//! one token per active slot. Each row's keys and values are written into its slot of the
//! slab before attention, and each row attends to positions `0..=pos` of its own slot:
//! causal within a prompt and bounded by the live length (E10).

use std::sync::OnceLock;

use rayon::prelude::*;

use super::attention::{Attn, attend_group, exp_fast};
use super::kernels::{Simd, dot};
use super::linear::Input;
use super::{Layer, Model};
use crate::engine::kv::KvSlab;

/// One token to run: which slot it belongs to and its position in that sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenRow {
    /// Token id.
    pub token: u32,
    /// KV slot of its sequence.
    pub slot: usize,
    /// Position in the sequence (RoPE angle and KV index), counting real tokens only.
    pub pos: usize,
}

/// The compute threads (`RAYON_NUM_THREADS`, else one per CPU).
fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("sluice-compute-{i}"))
            .build()
            .expect("compute threads")
    })
}

fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ms = dot(x, x) / x.len() as f32;
    let scale = 1.0 / (ms + eps).sqrt();
    for ((o, xi), wi) in out.iter_mut().zip(x).zip(w) {
        *o = xi * scale * wi;
    }
}

/// Per-row cos/sin of the RoPE angles, computed in f64 as the reference does.
fn rope_table(rows: &[TokenRow], rope_dim: usize, base: f32) -> Vec<(f32, f32)> {
    let half = rope_dim / 2;
    let mut t = Vec::with_capacity(rows.len() * half);
    for r in rows {
        for i in 0..half {
            let inv = (base as f64).powf(-((2 * i) as f64) / rope_dim as f64);
            let a = r.pos as f64 * inv;
            t.push((a.cos() as f32, a.sin() as f32));
        }
    }
    t
}

/// ggml's "normal" RoPE: rotates adjacent pairs (x0, x1), (x2, x3), ... of each head.
fn rope(x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
    for head in x.chunks_exact_mut(head_dim) {
        for (pair, (c, s)) in head.chunks_exact_mut(2).zip(cs) {
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * c - b * s;
            pair[1] = a * s + b * c;
        }
    }
}

impl Model {
    /// Runs `rows` through the model, writing their keys and values into `kv`, and returns
    /// the logits of the rows listed in `want` (`want.len() x vocab`, in that order).
    pub fn forward(&self, kv: &mut KvSlab, rows: &[TokenRow], want: &[usize]) -> Vec<f32> {
        // The whole pass runs on a worker of the compute pool: its parallel loops then
        // split work with the other workers directly instead of each one being injected
        // from outside the pool and waited for (hundreds of wake-ups per token).
        pool().install(|| self.forward_rows(kv, rows, want))
    }

    fn forward_rows(&self, kv: &mut KvSlab, rows: &[TokenRow], want: &[usize]) -> Vec<f32> {
        let c = &self.config;
        let n = rows.len();
        let (dim, hd) = (c.dim, c.head_dim);
        let q_dim = c.n_heads * hd;
        let kv_dim = c.n_kv_heads * hd;
        let w = &self.weights;

        let mut x = vec![0f32; n * dim];
        for (r, xr) in rows.iter().zip(x.chunks_exact_mut(dim)) {
            w.embed.row(r.token as usize, xr);
        }
        let cs = rope_table(rows, c.rope_dim, c.rope_base);
        let half = c.rope_dim / 2;
        let mut h = vec![0f32; n * dim];
        let mut q = vec![0f32; n * q_dim];
        let mut k = vec![0f32; n * kv_dim];
        let mut v = vec![0f32; n * kv_dim];
        let mut att = vec![0f32; n * q_dim];
        let mut o = vec![0f32; n * dim];
        let mut gate = vec![0f32; n * c.ffn_dim];
        let mut up = vec![0f32; n * c.ffn_dim];

        for (l, layer) in w.layers.iter().enumerate() {
            norm_rows(&x, &layer.attn_norm, c.rms_eps, &mut h);
            let input = Input::new(&h, n);
            layer.wq.matmul_input(&input, &mut q);
            layer.wk.matmul_input(&input, &mut k);
            layer.wv.matmul_input(&input, &mut v);
            for i in 0..n {
                let t = &cs[i * half..(i + 1) * half];
                rope(&mut q[i * q_dim..(i + 1) * q_dim], hd, t);
                rope(&mut k[i * kv_dim..(i + 1) * kv_dim], hd, t);
                let r = rows[i];
                kv.write(
                    l,
                    r.slot,
                    r.pos,
                    &k[i * kv_dim..(i + 1) * kv_dim],
                    &v[i * kv_dim..(i + 1) * kv_dim],
                );
            }
            self.attention(kv, l, rows, &q, &mut att);
            layer.wo.matmul(&att, n, &mut o);
            add(&mut x, &o);
            ffn(layer, &x, c.rms_eps, &mut h, &mut gate, &mut up, &mut o);
            add(&mut x, &o);
        }

        let m = want.len();
        let mut last = vec![0f32; m * dim];
        for (j, &i) in want.iter().enumerate() {
            rms_norm(
                &x[i * dim..(i + 1) * dim],
                &w.out_norm,
                c.rms_eps,
                &mut last[j * dim..(j + 1) * dim],
            );
        }
        let mut logits = vec![0f32; m * c.vocab];
        w.head
            .as_ref()
            .unwrap_or(&w.embed)
            .matmul(&last, m, &mut logits);
        logits
    }

    /// Scaled dot-product attention of every (row, KV head group) over its slot's
    /// positions 0..=pos.
    fn attention(&self, kv: &KvSlab, layer: usize, rows: &[TokenRow], q: &[f32], out: &mut [f32]) {
        let c = &self.config;
        let hd = c.head_dim;
        let group = c.n_heads / c.n_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        out.par_chunks_mut(group * hd).enumerate().for_each_init(
            Vec::new,
            |scores: &mut Vec<f32>, (idx, o)| {
                let (i, kvh) = (idx / c.n_kv_heads, idx % c.n_kv_heads);
                let r = rows[i];
                let (keys_t, values) = kv.read(layer, r.slot, kvh, r.pos + 1);
                let a = Attn {
                    q: &q[(i * c.n_heads + kvh * group) * hd..][..group * hd],
                    hd,
                    keys_t,
                    stride: kv.stride,
                    values,
                    scale,
                };
                attend_group(&a, scores, o);
            },
        );
    }
}

fn norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let dim = w.len();
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        rms_norm(xr, w, eps, or);
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// SwiGLU feed-forward: `down(silu(gate(h)) * up(h))` with `h = rms_norm(x)`, into `out`.
fn ffn(
    layer: &Layer,
    x: &[f32],
    eps: f32,
    h: &mut [f32],
    gate: &mut [f32],
    up: &mut [f32],
    out: &mut [f32],
) {
    let n = x.len() / layer.ffn_norm.len();
    norm_rows(x, &layer.ffn_norm, eps, h);
    let input = Input::new(h, n);
    layer.gate.matmul_input(&input, gate);
    layer.up.matmul_input(&input, up);
    silu_mul(gate, up);
    layer.down.matmul(gate, n, out);
}

/// `g = silu(g) * u`, with the vectorisable exponential.
fn silu_mul(gate: &mut [f32], up: &[f32]) {
    match Simd::current() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Simd::current` only returns a level whose features the CPU reports.
        Simd::Avx512 => unsafe { silu_avx512(gate, up) },
        _ => silu_body(gate, up),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn silu_avx512(gate: &mut [f32], up: &[f32]) {
    silu_body(gate, up)
}

#[inline(always)]
fn silu_body(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp_fast(-*g)) * u;
    }
}
