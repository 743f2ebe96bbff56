//! Shared building blocks: RMSNorm, rotary position embeddings and the gated MLP. The
//! attention block is in `attention.rs`.

use sluice_kernels::stages::stage;
use sluice_kernels::{Input, QLinear, dot, gelu_mul, silu_mul};

use super::TokenRow;

/// RMSNorm: `x / sqrt(mean(x²) + eps) * w`.
pub struct RmsNorm {
    weight: Vec<f32>,
    eps: f32,
}

impl RmsNorm {
    /// A norm with the file's weights as they are (llama, Qwen, ...).
    pub fn new(weight: Vec<f32>, eps: f32) -> Self {
        Self { weight, eps }
    }

    /// Gemma's norm, `x̂ * (1 + w)`, for files whose weights do not fold the 1 in: it is
    /// folded here once, so the forward pass is the same as for `new`.
    #[cfg(test)]
    pub fn one_plus(weight: Vec<f32>, eps: f32) -> Self {
        Self::new(weight.into_iter().map(|w| 1.0 + w).collect(), eps)
    }

    /// Width of one row.
    pub fn dim(&self) -> usize {
        self.weight.len()
    }

    /// Normalises one row.
    pub fn row(&self, x: &[f32], out: &mut [f32]) {
        let ms = dot(x, x) / x.len() as f32;
        let scale = 1.0 / (ms + self.eps).sqrt();
        for ((o, xi), wi) in out.iter_mut().zip(x).zip(&self.weight) {
            *o = xi * scale * wi;
        }
    }

    /// Normalises every row of `x` (rows of `dim()`) into `out`, a batch's rows in
    /// parallel.
    pub fn rows(&self, x: &[f32], out: &mut [f32]) {
        let dim = self.dim();
        let per = rows_per_task(dim) * dim;
        let run = |i: usize, out: &mut [f32]| {
            for (xr, or) in x[i * per..]
                .chunks_exact(dim)
                .zip(out.chunks_exact_mut(dim))
            {
                self.row(xr, or);
            }
        };
        sluice_kernels::threads::for_each_chunk(out, per, run);
    }

    /// Normalises every row in place, a batch's rows in parallel.
    pub fn rows_in_place(&self, x: &mut [f32]) {
        let dim = self.dim();
        let per = rows_per_task(dim) * dim;
        let run = |_: usize, x: &mut [f32]| {
            let mut tmp = vec![0f32; dim];
            for xr in x.chunks_exact_mut(dim) {
                self.row(xr, &mut tmp);
                xr.copy_from_slice(&tmp);
            }
        };
        sluice_kernels::threads::for_each_chunk(x, per, run);
    }
}

/// Elements below which a row-wise pass (norms, residual adds, RoPE) is not worth a
/// parallel region (about a microsecond, `sluice_kernels::threads`): a task takes whole
/// rows of about this many elements, and a pass of one task runs on the calling thread.
const TASK_ELEMENTS: usize = 4096;

/// Rows of `dim` elements per task of a row-wise pass.
pub fn rows_per_task(dim: usize) -> usize {
    (TASK_ELEMENTS / dim.max(1)).max(1)
}

/// Which dimensions RoPE rotates together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(x0, x1), (x2, x3), ...`: how GGUF stores llama's Q and K (the
    /// converter permutes the weights so that this equals the original NeoX form).
    Adjacent,
    /// Halves `(x_i, x_{i + d/2})`: GPT-NeoX, Qwen, Gemma, Phi-3 as GGUF stores them.
    Neox,
}

/// How positions are stretched for long contexts: the hook that scaling schemes
/// fill in by changing the per-pair frequencies.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// Frequencies as trained.
    None,
    /// Positions divided by `factor` (`rope.scaling.type = linear`).
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// Pair `i`'s frequency divided by `factors[i]`: Llama 3's scaling and Phi-3's
    /// longrope, which GGUF stores as a tensor (`rope_freqs`, `rope_factors_*`).
    Factors(Vec<f32>),
}

/// Rotary position embeddings over the first `dim` dimensions of each head.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    style: RopeStyle,
    /// Factor on cos and sin (`rope.scaling.attn_factor`; 1 for most models).
    mscale: f32,
    /// Per pair `i < dim/2`: the angle per position, `base^(-2i/dim)` after scaling.
    inv_freq: Vec<f64>,
}

impl Rope {
    /// RoPE over `dim` dimensions of each head with base frequency `base`.
    pub fn new(dim: usize, base: f32, style: RopeStyle, scaling: RopeScaling) -> Self {
        let inv_freq = (0..dim / 2)
            .map(|i| {
                let f = (base as f64).powf(-((2 * i) as f64) / dim as f64);
                match &scaling {
                    RopeScaling::None => f,
                    RopeScaling::Linear { factor } => f / factor,
                    RopeScaling::Factors(v) => f / v.get(i).copied().unwrap_or(1.0) as f64,
                }
            })
            .collect();
        Self {
            style,
            mscale: 1.0,
            inv_freq,
        }
    }

    /// The same rotation with cos and sin multiplied by `m` (Phi-3's longrope attention
    /// factor, as llama.cpp applies it).
    pub fn with_mscale(self, m: f32) -> Self {
        Self { mscale: m, ..self }
    }

    /// Per-row `(cos, sin)` of every pair's angle, computed in f64.
    pub fn table(&self, rows: &[TokenRow]) -> Vec<(f32, f32)> {
        let mut t = Vec::with_capacity(rows.len() * self.inv_freq.len());
        for r in rows {
            for inv in &self.inv_freq {
                let a = r.pos as f64 * inv;
                t.push((a.cos() as f32 * self.mscale, a.sin() as f32 * self.mscale));
            }
        }
        t
    }

    /// Pairs per head.
    pub fn pairs(&self) -> usize {
        self.inv_freq.len()
    }

    /// Rotates every head (`head_dim` wide) of one row's `x` by its row of the table.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, cs: &[(f32, f32)]) {
        let half = self.pairs();
        for head in x.chunks_exact_mut(head_dim) {
            match self.style {
                RopeStyle::Adjacent => {
                    for (pair, (c, s)) in head.chunks_exact_mut(2).zip(cs) {
                        let (a, b) = (pair[0], pair[1]);
                        pair[0] = a * c - b * s;
                        pair[1] = a * s + b * c;
                    }
                }
                RopeStyle::Neox => {
                    for (i, (c, s)) in cs.iter().enumerate().take(half) {
                        let (a, b) = (head[i], head[i + half]);
                        head[i] = a * c - b * s;
                        head[i + half] = a * s + b * c;
                    }
                }
            }
        }
    }
}

/// The gate's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) * up` (llama, Qwen, Mistral, Phi-3).
    Silu,
    /// GeGLU: `gelu_tanh(gate) * up` (Gemma).
    Gelu,
}

/// The gated feed-forward block: `down(act(gate(h)) * up(h))`.
pub struct Mlp {
    /// Gate projection.
    pub gate: QLinear,
    /// Up projection.
    pub up: QLinear,
    /// Down projection.
    pub down: QLinear,
    /// Activation of the gate.
    pub act: Activation,
}

/// Scratch buffers of the MLP for `n` rows.
pub struct MlpScratch {
    gate: Vec<f32>,
    up: Vec<f32>,
}

impl Mlp {
    /// Scratch for `n` rows.
    pub fn scratch(&self, n: usize) -> MlpScratch {
        MlpScratch {
            gate: vec![0f32; n * self.gate.rows],
            up: vec![0f32; n * self.up.rows],
        }
    }

    /// `out = down(act(gate(h)) * up(h))` for the `n` rows of `h`.
    pub fn forward(&self, h: &[f32], n: usize, s: &mut MlpScratch, out: &mut [f32]) {
        stage("gate, up", || {
            let input = Input::new(h, n);
            QLinear::matmul_many(
                &input,
                &mut [(&self.gate, &mut s.gate[..]), (&self.up, &mut s.up[..])],
            );
        });
        stage("fetch ahead", || QLinear::fetch_ahead(n, &[&self.down]));
        stage("activation", || match self.act {
            Activation::Silu => silu_mul(&mut s.gate, &s.up),
            Activation::Gelu => gelu_mul(&mut s.gate, &s.up),
        });
        stage("down", || self.down.matmul(&s.gate, n, out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pos: usize) -> TokenRow {
        TokenRow {
            token: 0,
            slot: 0,
            pos,
        }
    }

    #[test]
    fn neox_rope_is_adjacent_rope_on_permuted_dimensions() {
        // Interleaving the halves of a head turns NeoX pairs into adjacent pairs.
        let hd = 8;
        let x: Vec<f32> = (0..hd).map(|i| i as f32 * 0.37 - 1.0).collect();
        let perm: Vec<usize> = (0..hd / 2).flat_map(|i| [i, i + hd / 2]).collect();
        let adj = Rope::new(hd, 10_000.0, RopeStyle::Adjacent, RopeScaling::None);
        let neox = Rope::new(hd, 10_000.0, RopeStyle::Neox, RopeScaling::None);
        let t = adj.table(&[row(7)]);
        let mut a: Vec<f32> = perm.iter().map(|&i| x[i]).collect();
        adj.apply(&mut a, hd, &t);
        let mut b = x.clone();
        neox.apply(&mut b, hd, &t);
        for (k, &i) in perm.iter().enumerate() {
            assert_eq!(a[k], b[i]);
        }
    }

    #[test]
    fn rope_keeps_norms_and_linear_scaling_divides_positions() {
        let hd = 16;
        let x: Vec<f32> = (0..hd).map(|i| (i as f32).sin()).collect();
        let plain = Rope::new(hd, 500.0, RopeStyle::Neox, RopeScaling::None);
        let scaled = Rope::new(
            hd,
            500.0,
            RopeStyle::Neox,
            RopeScaling::Linear { factor: 4.0 },
        );
        let (mut a, mut b) = (x.clone(), x.clone());
        plain.apply(&mut a, hd, &plain.table(&[row(3)]));
        scaled.apply(&mut b, hd, &scaled.table(&[row(12)]));
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>();
        assert!((norm(&a) - norm(&x)).abs() < 1e-4);
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-5);
        }
    }

    #[test]
    fn gemma_norm_folds_the_one_in() {
        let x = [1.0f32, -2.0, 3.0, 0.5];
        let w = vec![0.1f32, -0.2, 0.0, 1.0];
        let mut a = [0f32; 4];
        let mut b = [0f32; 4];
        RmsNorm::one_plus(w.clone(), 1e-6).row(&x, &mut a);
        RmsNorm::new(vec![1.0; 4], 1e-6).row(&x, &mut b);
        for i in 0..4 {
            assert!((a[i] - b[i] * (1.0 + w[i])).abs() < 1e-6);
        }
    }
}
