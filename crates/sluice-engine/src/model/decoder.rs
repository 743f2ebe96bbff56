//! The decoder-only transformer every architecture is built as: embeddings, then per
//! layer `x += attn(norm(x))` and `x += mlp(norm(x))` (with optional extra norms after
//! each block, as Gemma has), then the final norm and the output head.
//!
//! Prefill and decode are the same computation: prefill passes every real token of the
//! prompts (padding is never computed, so it never becomes a key), decode passes one token
//! per running slot. Each row's keys and values are written into its slot of the slab
//! before attention, and each row attends to positions `0..=pos` of its own slot: causal
//! within a prompt and bounded by the live length (docs/ARCHITECTURE.md, "The forward
//! pass").

use sluice_kernels::QLinear;
use sluice_kernels::stages::stage;

use super::attention::{Attention, AttentionOptions};
use super::blocks::{Activation, Mlp, RmsNorm, Rope, RopeStyle, rows_per_task};
use super::hparams::Hparams;
use super::tensors::{matrix, optional_matrix};
use super::{Model, Shape, TokenRow};
use crate::error::ModelError;
use crate::gguf::GgufFile;
use crate::kv::KvSlab;

/// One transformer block.
pub struct Layer {
    /// Norm before attention.
    pub attn_norm: RmsNorm,
    /// The attention block.
    pub attn: Attention,
    /// Norm of the attention output before the residual add (Gemma 2/3).
    pub post_attn_norm: Option<RmsNorm>,
    /// Norm before the MLP.
    pub ffn_norm: RmsNorm,
    /// The feed-forward block.
    pub mlp: Mlp,
    /// Norm of the MLP output before the residual add (Gemma 2/3).
    pub post_ffn_norm: Option<RmsNorm>,
}

/// A loaded decoder-only model.
pub struct Decoder {
    /// Shape the engine sizes the KV slab by.
    pub shape: Shape,
    /// Token embeddings (`vocab x dim`).
    pub embed: QLinear,
    /// Factor applied to embeddings (Gemma: `sqrt(dim)`).
    pub embed_scale: Option<f32>,
    /// The blocks.
    pub layers: Vec<Layer>,
    /// Final norm.
    pub out_norm: RmsNorm,
    /// Output head; `None` when tied to the embedding table.
    pub head: Option<QLinear>,
    /// Soft-cap of the final logits (Gemma 2).
    pub final_softcap: Option<f32>,
}

impl Decoder {
    /// The plain pre-norm decoder most families are (llama, Mistral, Qwen 2/3, Phi-3):
    /// `attn_norm`, attention, `ffn_norm`, gated MLP per layer; `output_norm`; an
    /// `output` head or the embedding table tied. Biases, QK-norms and fused tensors are
    /// taken as the file has them; the file's sliding window applies to every layer.
    pub fn standard(
        file: &GgufFile,
        hp: &Hparams,
        style: RopeStyle,
        act: Activation,
    ) -> Result<Decoder, ModelError> {
        let rope = hp.rope(style);
        let options = AttentionOptions {
            window: hp.window,
            ..AttentionOptions::default()
        };
        let mut layers = Vec::with_capacity(hp.n_layers);
        for l in 0..hp.n_layers {
            let p = |s: &str| format!("blk.{l}.{s}.weight");
            layers.push(Layer {
                attn_norm: hp.norm(file, &p("attn_norm"), hp.dim)?,
                attn: hp.attention(file, l, rope.clone(), options.clone())?,
                post_attn_norm: None,
                ffn_norm: hp.norm(file, &p("ffn_norm"), hp.dim)?,
                mlp: hp.mlp(file, l, act)?,
                post_ffn_norm: None,
            });
        }
        Ok(Decoder {
            shape: hp.shape(),
            embed: matrix(file, "token_embd.weight", hp.vocab, hp.dim)?,
            embed_scale: None,
            layers,
            out_norm: hp.norm(file, "output_norm.weight", hp.dim)?,
            head: optional_matrix(file, "output.weight", hp.vocab, hp.dim)?,
            final_softcap: None,
        })
    }
}

impl Model for Decoder {
    fn shape(&self) -> &Shape {
        &self.shape
    }

    fn forward_into(
        &self,
        kv: &mut KvSlab,
        rows: &[TokenRow],
        want: &[usize],
        logits: &mut Vec<f32>,
    ) {
        // The pass runs on the calling thread; its parallel regions (matmuls, attention,
        // activations) share out their tasks with `sluice_kernels::threads`' helpers.
        let last = self.hidden_rows(kv, rows, want);
        let m = want.len();
        if m == 0 || last.is_empty() {
            logits.clear();
            return;
        }
        let head = self.head.as_ref().unwrap_or(&self.embed);
        // Every element is overwritten: the old contents of a reused buffer need no zeroing.
        logits.resize(m * head.rows, 0.0);
        stage("output head", || head.matmul(&last, m, logits));
        if let Some(cap) = self.final_softcap {
            logits.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
        }
    }

    fn hidden_into(&self, kv: &mut KvSlab, rows: &[TokenRow], want: &[usize], out: &mut Vec<f32>) {
        *out = self.hidden_rows(kv, rows, want);
    }
}

/// The residual connection, `x += y`, then `h = norm(x)` when the next block has an input
/// norm, row by row, a batch's rows in parallel.
fn residual(x: &mut [f32], y: &[f32], norm: Option<&RmsNorm>, h: &mut [f32], dim: usize) {
    let per = rows_per_task(dim) * dim;
    // Task `i` takes chunk `i` of each (of `h`, an empty one past its end).
    let empty = std::iter::repeat_with(|| -> &mut [f32] { &mut [] });
    let mut work: Vec<_> = x
        .chunks_mut(per)
        .zip(h.chunks_mut(per).chain(empty))
        .collect();
    // (One chunk runs on this thread: `for_each_item` hands out no single task.)
    sluice_kernels::threads::for_each_item(&mut work, |i, (x, h)| {
        for (a, b) in x.iter_mut().zip(&y[i * per..]) {
            *a += b;
        }
        if let Some(norm) = norm {
            for (xr, hr) in x.chunks_exact(dim).zip(h.chunks_exact_mut(dim)) {
                norm.row(xr, hr);
            }
        }
    });
}

impl Decoder {
    /// The rows through every layer, then the output norm of the rows in `want`.
    fn hidden_rows(&self, kv: &mut KvSlab, rows: &[TokenRow], want: &[usize]) -> Vec<f32> {
        let n = rows.len();
        let dim = self.embed.cols;
        let mut x = vec![0f32; n * dim];
        for (r, xr) in rows.iter().zip(x.chunks_exact_mut(dim)) {
            self.embed.row(r.token as usize, xr);
            if let Some(s) = self.embed_scale {
                xr.iter_mut().for_each(|v| *v *= s);
            }
        }
        // RoPE tables, one per distinct rotary setting (layers usually share one).
        let mut tables: Vec<(&Rope, Vec<(f32, f32)>)> = Vec::new();
        let mut h = vec![0f32; n * dim];
        let mut mlp_out = vec![0f32; n * dim];
        let (Some(first), true) = (self.layers.first(), n > 0) else {
            return Vec::new();
        };
        let mut attn = first.attn.scratch(n);
        let mut mlp = first.mlp.scratch(n);
        for (l, layer) in self.layers.iter().enumerate() {
            let rope = &layer.attn.rope;
            let t = match tables.iter().position(|(r, _)| *r == rope) {
                Some(i) => i,
                None => {
                    tables.push((rope, rope.table(rows)));
                    tables.len() - 1
                }
            };
            if l == 0 {
                layer.attn_norm.rows(&x, &mut h);
            }
            layer.attn.forward(kv, l, rows, &tables[t].1, &h, &mut attn);
            stage("fetch ahead", || {
                QLinear::fetch_ahead(n, &[&layer.mlp.gate, &layer.mlp.up])
            });
            stage("residual, norms", || {
                if let Some(norm) = &layer.post_attn_norm {
                    norm.rows_in_place(&mut attn.out);
                }
                residual(&mut x, &attn.out, Some(&layer.ffn_norm), &mut h, dim);
            });
            layer.mlp.forward(&h, n, &mut mlp, &mut mlp_out);
            // The next layer's input norm, in the same pass.
            let next = self.layers.get(l + 1).map(|next| &next.attn_norm);
            stage("fetch ahead", || match self.layers.get(l + 1) {
                Some(next) => {
                    let a = &next.attn;
                    QLinear::fetch_ahead(n, &[&a.wq, &a.wk, &a.wv]);
                }
                None if !want.is_empty() => {
                    QLinear::fetch_ahead(n, &[self.head.as_ref().unwrap_or(&self.embed)]);
                }
                None => {}
            });
            stage("residual, norms", || {
                if let Some(norm) = &layer.post_ffn_norm {
                    norm.rows_in_place(&mut mlp_out);
                }
                residual(&mut x, &mlp_out, next, &mut h, dim);
            });
        }
        let m = want.len();
        let mut last = vec![0f32; m * dim];
        for (j, &i) in want.iter().enumerate() {
            self.out_norm.row(
                &x[i * dim..(i + 1) * dim],
                &mut last[j * dim..(j + 1) * dim],
            );
        }
        last
    }
}
