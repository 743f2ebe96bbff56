//! The attention block: Q/K/V projections (optional bias), optional per-head QK-norm,
//! RoPE, the KV pool write, attention over the slot's live positions read through its
//! block table (optional sliding window and logit soft-capping, any head size), and the
//! output projection.

use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_kernels::stages::stage;
use sluice_kernels::{
    Attn, Input, PartStat, QLinear, attend_parts, attend_rows, merge_parts, rows_per_tile,
};

use super::TokenRow;
use super::blocks::{RmsNorm, Rope, rows_per_task};
use crate::kv::KvSlab;

/// Below this many (position, KV head) pairs a layer's attention runs on one thread. A
/// parallel region costs about a microsecond (`sluice_kernels::threads`), so only the
/// shortest rows stay serial; 256 rather than 2,048 made a single SmolLM2 stream's decode
/// step 4–6% faster at positions 64..256 (benches/forward).
const SERIAL_WORK: usize = 256;

/// A layer whose (row, KV head) items are fewer than this shares a long decode row's parts
/// out between the threads (0: the thread count). No number depends on it; the tests set
/// it to take both ways through the same requests.
static SPLIT_BELOW: AtomicUsize = AtomicUsize::new(0);

/// Sets `SPLIT_BELOW` (0: the thread count, the default).
pub fn set_split_below(items: usize) {
    SPLIT_BELOW.store(items, Ordering::Relaxed);
}

/// A compute thread's attention buffers, kept from call to call: the scores, and a tile
/// of prompt rows' outputs.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    tile: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// Options that differ between architectures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttentionOptions {
    /// Attend to at most this many most recent positions (sliding-window layers).
    pub window: Option<usize>,
    /// Soft-cap the scores: `cap * tanh(s / cap)`.
    pub softcap: Option<f32>,
    /// Score scale; `None` is `1/sqrt(head_dim)`.
    pub scale: Option<f32>,
}

/// One layer's attention weights and settings.
pub struct Attention {
    /// Query projection (`n_heads * head_dim` outputs).
    pub wq: QLinear,
    /// Key projection (`n_kv_heads * head_dim` outputs).
    pub wk: QLinear,
    /// Value projection.
    pub wv: QLinear,
    /// Output projection.
    pub wo: QLinear,
    /// Q/K/V biases (Qwen 2).
    pub bias: Option<[Vec<f32>; 3]>,
    /// Per-head norms of queries and keys before RoPE (Qwen 3, Gemma 3).
    pub qk_norm: Option<[RmsNorm; 2]>,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (a divisor of `n_heads`).
    pub n_kv_heads: usize,
    /// Size of one head.
    pub head_dim: usize,
    /// Rotary embedding of this layer.
    pub rope: Rope,
    /// Window, soft-cap, scale.
    pub options: AttentionOptions,
}

/// Scratch buffers for `n` rows.
pub struct AttnScratch {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    /// The block's output, `n x dim`.
    pub out: Vec<f32>,
}

fn add_bias(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        for (a, b) in row.iter_mut().zip(b) {
            *a += b;
        }
    }
}

impl Attention {
    /// Scratch for `n` rows.
    pub fn scratch(&self, n: usize) -> AttnScratch {
        let (q, kv) = (
            self.n_heads * self.head_dim,
            self.n_kv_heads * self.head_dim,
        );
        AttnScratch {
            q: vec![0f32; n * q],
            k: vec![0f32; n * kv],
            v: vec![0f32; n * kv],
            att: vec![0f32; n * q],
            out: vec![0f32; n * self.wo.rows],
        }
    }

    /// Attention of layer `layer` for the normalised rows `h`, into `s.out` (`n x dim`).
    /// `cs` is this layer's RoPE table for `rows`.
    pub fn forward(
        &self,
        kv: &mut KvSlab,
        layer: usize,
        rows: &[TokenRow],
        cs: &[(f32, f32)],
        h: &[f32],
        s: &mut AttnScratch,
    ) {
        let n = rows.len();
        if n < sluice_kernels::BATCH_ROWS {
            // A decode step's keys and values have left the cache since the last token (the
            // whole model streamed through it): asked for now, they arrive during the
            // matmul below instead of stalling the attention after it.
            stage("kv prefetch", || {
                kv.prefetch(layer, rows, self.options.window)
            });
        }
        stage("q, k, v", || {
            let input = Input::new(h, n);
            QLinear::matmul_many(
                &input,
                &mut [
                    (&self.wq, &mut s.q[..]),
                    (&self.wk, &mut s.k[..]),
                    (&self.wv, &mut s.v[..]),
                ],
            );
        });
        stage("fetch ahead", || QLinear::fetch_ahead(n, &[&self.wo]));
        if let Some([bq, bk, bv]) = &self.bias {
            add_bias(&mut s.q, bq);
            add_bias(&mut s.k, bk);
            add_bias(&mut s.v, bv);
        }
        if let Some([qn, kn]) = &self.qk_norm {
            qn.rows_in_place(&mut s.q);
            kn.rows_in_place(&mut s.k);
        }
        stage("rope", || self.rotate(cs, n, &mut s.q, &mut s.k));
        stage("kv write", || kv.write_rows(layer, rows, &s.k, &s.v));
        stage("attention", || {
            self.attend(kv, layer, rows, &s.q, &mut s.att)
        });
        stage("o", || self.wo.matmul(&s.att, n, &mut s.out));
    }

    /// RoPE on every row's queries and keys, a batch's rows in parallel (tasks as in
    /// `blocks::rows_per_task`).
    fn rotate(&self, cs: &[(f32, f32)], n: usize, q: &mut [f32], k: &mut [f32]) {
        let (hd, half) = (self.head_dim, self.rope.pairs());
        let (q_dim, kv_dim) = (self.n_heads * hd, self.n_kv_heads * hd);
        let per = rows_per_task(q_dim + kv_dim);
        let chunks = q.chunks_mut(per * q_dim).zip(k.chunks_mut(per * kv_dim));
        let mut work: Vec<_> = chunks.take(n.div_ceil(per)).collect();
        sluice_kernels::threads::for_each_item(&mut work, |c, (q, k)| {
            for (j, (q, k)) in q
                .chunks_exact_mut(q_dim)
                .zip(k.chunks_exact_mut(kv_dim))
                .enumerate()
            {
                let t = &cs[(c * per + j) * half..][..half];
                self.rope.apply(q, hd, t);
                self.rope.apply(k, hd, t);
            }
        });
    }

    /// Scaled dot-product attention of every (row, KV head group) over its slot's
    /// positions `0..=pos` (the last `window` of them for sliding-window layers).
    /// Consecutive rows of one slot (a prompt chunk) are taken in tiles that read each
    /// key and value once for the whole tile; a row's output is the same in any tile.
    fn attend(&self, kv: &KvSlab, layer: usize, rows: &[TokenRow], q: &[f32], out: &mut [f32]) {
        let hd = self.head_dim;
        let (heads, kv_heads) = (self.n_heads, self.n_kv_heads);
        let group = heads / kv_heads;
        let scale = self.options.scale.unwrap_or(1.0 / (hd as f32).sqrt());
        let most = rows_per_tile(group);
        // Tiles: (first row, rows) of consecutive positions of one slot.
        let mut tiles = Vec::new();
        let mut i = 0;
        while i < rows.len() {
            let mut t = 1;
            while t < most
                && i + t < rows.len()
                && rows[i + t].slot == rows[i].slot
                && rows[i + t].pos == rows[i].pos + t
            {
                t += 1;
            }
            tiles.push((i, t));
            i += t;
        }
        // The last tiles of a prompt reach the most positions: handed out first, they do
        // not leave one thread working alone at the end of the region.
        let items: Vec<(usize, usize, usize)> = tiles
            .iter()
            .rev()
            .flat_map(|&(i, t)| (0..kv_heads).map(move |kvh| (i, t, kvh)))
            .collect();
        let attn = |i: usize, kvh: usize| {
            let r = rows[i];
            let len = r.pos + 1;
            kv.read(layer, r.slot, kvh, len).attn(
                &q[(i * heads + kvh * group) * hd..][..group * hd],
                hd,
                len,
                scale,
                self.options.window,
                self.options.softcap,
            )
        };
        // Fewer (tile or decode row, KV head) items than threads (one sequence's decode
        // row over fewer KV heads than threads: Gemma 3 has one): a long decode row's
        // parts (`ATTN_PART`; one-row items only) are shared out in runs of consecutive
        // parts, at least one item per thread in all, each run streaming one stretch of
        // the row in one pass; the runs' outputs are merged after the region. The bits
        // are those of the row whole, however the runs fall. With at least as many items
        // as threads, splitting gained nothing on the 2-vCPU AMD EPYC VM (SmolLM2's three
        // KV heads on two threads, docs/ARCHITECTURE.md).
        let threads = sluice_kernels::threads::threads();
        let below = match SPLIT_BELOW.load(Ordering::Relaxed) {
            0 => threads,
            n => n,
        };
        let split = items.len() < below;
        // An item's parts and how many runs it is cut into (1: whole, its parts unused;
        // they are only looked up, a `kv.read`, for an item that may be cut).
        let runs_of = |(i0, t, kvh): (usize, usize, usize)| {
            if !split || t != 1 {
                return (0..0, 1);
            }
            let parts = attn(i0, kvh).parts();
            let n = parts.len();
            if n < 2 {
                return (parts, 1);
            }
            (parts, below.div_ceil(items.len()).min(n))
        };
        // Looked up once per item: the sizes below and the jobs after them.
        let cuts: Vec<_> = items.iter().map(|&it| runs_of(it)).collect();
        let cut: usize = cuts
            .iter()
            .filter(|(_, k)| *k > 1)
            .map(|(parts, _)| parts.len())
            .sum();
        let mut part_out = vec![0f32; cut * group * hd];
        let mut part_stats = vec![PartStat::default(); cut * group];
        let (mut outs_left, mut stats_left) = (&mut part_out[..], &mut part_stats[..]);
        // Each (row, KV head) has its own `group * hd` run of `out`, and each item's
        // rows are its own: an item takes its runs along (`runs[k]` is row `i0 + k`'s) and
        // writes them in place, or its parts write theirs and the merge its run.
        let mut free: Vec<Option<&mut [f32]>> = out.chunks_mut(group * hd).map(Some).collect();
        let mut taken: Vec<&mut [f32]> = Vec::with_capacity(free.len());
        for &(i0, t, kvh) in &items {
            let runs = (i0..i0 + t).map(|i| free[i * kv_heads + kvh].take());
            taken.extend(runs.map(|r| r.expect("one item per (row, KV head)")));
        }
        let mut rest = &mut taken[..];
        let mut jobs = Vec::with_capacity(items.len() + 2 * threads);
        let mut merges = Vec::new();
        let mut first = 0;
        for (&item, (parts, k)) in items.iter().zip(cuts) {
            let (runs, tail) = std::mem::take(&mut rest).split_at_mut(item.1);
            rest = tail;
            if k <= 1 {
                jobs.push(Job::Rows(item, runs));
                continue;
            }
            merges.push((runs, first, parts.len()));
            first += parts.len();
            // k runs of consecutive parts, the first ones a part longer.
            let mut c = parts.start;
            for j in 0..k {
                let n = parts.len() / k + usize::from(j < parts.len() % k);
                let (o, o_rest) = std::mem::take(&mut outs_left).split_at_mut(n * group * hd);
                let (st, st_rest) = std::mem::take(&mut stats_left).split_at_mut(n * group);
                (outs_left, stats_left) = (o_rest, st_rest);
                jobs.push(Job::Parts {
                    row: item.0,
                    kvh: item.2,
                    parts: c..c + n,
                    out: o,
                    stats: st,
                });
                c += n;
            }
        }
        let one = |scratch: &mut Scratch, job: &mut Job| {
            let ((i0, t, kvh), runs) = match job {
                Job::Rows(item, runs) => (*item, runs),
                Job::Parts {
                    row,
                    kvh,
                    parts,
                    out,
                    stats,
                } => {
                    let a = attn(*row, *kvh);
                    return attend_parts(&a, parts.clone(), &mut scratch.scores, out, stats);
                }
            };
            if t == 1 {
                attend_rows(&[attn(i0, kvh)], &mut scratch.scores, runs[0]);
                return;
            }
            let tile: Vec<Attn> = (i0..i0 + t).map(|i| attn(i, kvh)).collect();
            scratch.tile.resize(t * group * hd, 0.0);
            attend_rows(&tile, &mut scratch.scores, &mut scratch.tile);
            for (run, o) in runs.iter_mut().zip(scratch.tile.chunks_exact(group * hd)) {
                run.copy_from_slice(o);
            }
        };
        // Little work (the first positions of one sequence) runs on this thread: handing
        // it out would cost more than it saves.
        let work: usize = rows.iter().map(|r| r.pos + 1).sum::<usize>() * kv_heads;
        if work < SERIAL_WORK {
            SCRATCH.with_borrow_mut(|scratch| {
                for job in &mut jobs {
                    one(scratch, job);
                }
            });
        } else {
            sluice_kernels::threads::for_each_item(&mut jobs, |_, job| {
                SCRATCH.with_borrow_mut(|scratch| one(scratch, job))
            });
        }
        drop(jobs);
        let per = group * hd;
        for (runs, first, n) in merges {
            let stats = &part_stats[first * group..][..n * group];
            merge_parts(n, stats, &part_out[first * per..][..n * per], runs[0]);
        }
    }
}

/// A piece of a layer's attention for one thread: a tile of rows against one KV head
/// (`(first row, rows, KV head)`, with the rows' runs of the output), or a run of
/// consecutive parts of a long decode row (their outputs and stats, merged after the
/// region).
enum Job<'o, 'r, 'p> {
    Rows((usize, usize, usize), &'r mut [&'o mut [f32]]),
    Parts {
        row: usize,
        kvh: usize,
        parts: std::ops::Range<usize>,
        out: &'p mut [f32],
        stats: &'p mut [PartStat],
    },
}
