//! `sampling::draw` without sorting the candidates: the running probability in draw
//! order (logit descending, lower id first) is found bin by bin. Tokens fall into bins of
//! 1/64 nat (x temperature) below the best logit (rounded to the nearest); the bins'
//! masses give, in one pass, where top-p's cut and the draw's target fall, and only the
//! tokens of those bins are sorted. The exact walk adds token probabilities one by one; the
//! bins add them in another order, so sums differ by rounding (about 1e-11 at most for
//! 262,144 tokens). Whenever a cut or the target lies within `MARGIN` of a running sum,
//! where that rounding could put it on the other side, this gives up and the exact walk
//! decides: the chosen token is always the exact walk's (docs/ARCHITECTURE.md,
//! "Sampling").

use super::{Ranked, SamplingParams};

/// Bins: 32 nats below the best logit; every token further down goes to the last bin.
const BINS: usize = 2048;
const PER_NAT: f32 = 64.0;
/// Far above the rounding of any sum of probabilities here, far below any gap a draw
/// is likely to land in.
const MARGIN: f64 = 1e-9;

/// One logits row in bins: each token's bin, and each bin's weight and (when asked for)
/// token count.
pub(super) struct Bins<'a> {
    logits: &'a [f32],
    w: &'a [f32],
    total: f64,
    bin: &'a [u16],
    mass: Vec<f64>,
    count: Vec<usize>,
}

impl<'a> Bins<'a> {
    /// `w` and `total` as `exp_weights` gives them for `max` and temperature `t`; the
    /// logits hold no NaN. `bin` is scratch space, overwritten. The bins' token counts
    /// (about a third of the histogram's cost) are only made when `counts` is set; without
    /// them every count reads 0.
    pub(super) fn new(
        logits: &'a [f32],
        w: &'a [f32],
        bin: &'a mut Vec<u16>,
        total: f64,
        (max, t): (f32, f32),
        counts: bool,
    ) -> Self {
        bin.resize(logits.len(), 0);
        sluice_kernels::bin_indices(logits, max, PER_NAT / t, (BINS - 1) as u16, bin);
        let bin: &'a [u16] = bin;
        // Four histograms (`j * BINS + bin`), each taking every fourth token, so that
        // neighbouring tokens in one bin do not wait on each other's additions.
        let mut mass = vec![0f64; 4 * BINS];
        let mut count = vec![0u32; if counts { 4 * BINS } else { 0 }];
        let mut quads = bin.chunks_exact(4).zip(w.chunks_exact(4));
        // Two loops rather than a test of `counts` per token: the single loop measured
        // 3-7% slower per sampled Gemma row (benches/sampling).
        if counts {
            for (k, x) in &mut quads {
                for j in 0..4 {
                    let at = j * BINS + k[j] as usize % BINS;
                    mass[at] += x[j] as f64;
                    count[at] += 1;
                }
            }
        } else {
            for (k, x) in &mut quads {
                for j in 0..4 {
                    mass[j * BINS + k[j] as usize % BINS] += x[j] as f64;
                }
            }
        }
        let tail = bin.len() / 4 * 4;
        for (&k, &x) in bin[tail..].iter().zip(&w[tail..]) {
            mass[k as usize % BINS] += x as f64;
            if counts {
                count[k as usize % BINS] += 1;
            }
        }
        let at = |j: usize, b: usize| j * BINS + b;
        Self {
            logits,
            w,
            total,
            bin,
            mass: (0..BINS)
                .map(|b| (mass[at(0, b)] + mass[at(1, b)]) + (mass[at(2, b)] + mass[at(3, b)]))
                .collect(),
            count: (0..BINS)
                .map(|b| match counts {
                    true => (0..4).map(|j| count[at(j, b)] as usize).sum(),
                    false => 0,
                })
                .collect(),
        }
    }

    /// Bin `b`'s tokens in draw order.
    fn sorted(&self, b: usize) -> Vec<usize> {
        // Chunks without the bin are skipped after one comparison pass each (vectorised).
        let b = b as u16;
        let mut toks = Vec::new();
        for (c, chunk) in self.bin.chunks(32).enumerate() {
            if chunk.iter().fold(false, |any, &k| any | (k == b)) {
                let at = c * 32;
                toks.extend((0..chunk.len()).filter(|&j| chunk[j] == b).map(|j| at + j));
            }
        }
        Ranked::sort(self.logits, &mut toks);
        toks
    }

    /// The first token in draw order whose running probability reaches `x` (`> x` when
    /// `strict`, else `>= x`), with that sum and its position (1-based), if it is among
    /// the first `limit`; `None` when rounding could decide otherwise.
    fn crossing(&self, x: f64, strict: bool, limit: usize) -> Option<(usize, f64, usize)> {
        let (mut cum, mut pos) = (0.0, 0);
        for b in 0..BINS {
            let next = cum + self.mass[b] / self.total;
            if next < x - MARGIN {
                (cum, pos) = (next, pos + self.count[b]);
                continue;
            }
            if next <= x + MARGIN {
                return None;
            }
            let mut acc = cum;
            for c in self.sorted(b) {
                let before = acc;
                acc += self.w[c] as f64 / self.total;
                pos += 1;
                if (strict && acc > x) || (!strict && acc >= x) {
                    let clear = acc - x > MARGIN && x - before > MARGIN;
                    return (clear && pos <= limit).then_some((c, acc, pos));
                }
            }
            return None;
        }
        None
    }

    /// The first `keep` tokens in draw order: every token of the bins before the bin
    /// returned, then the tokens returned (the start of that bin, sorted).
    fn first(&self, keep: usize) -> (usize, Vec<usize>) {
        let mut pos = 0;
        for b in 0..BINS {
            if pos + self.count[b] < keep {
                pos += self.count[b];
                continue;
            }
            let mut toks = self.sorted(b);
            toks.truncate(keep - pos);
            return (b, toks);
        }
        (BINS, Vec::new())
    }

    /// The weight of the first `keep` tokens in draw order.
    fn prefix_weight(&self, keep: usize) -> f64 {
        let (b, toks) = self.first(keep);
        let whole: f64 = self.mass[..b].iter().sum();
        whole + toks.iter().map(|&c| self.w[c] as f64).sum::<f64>()
    }

    /// How many of the first `keep` tokens in draw order satisfy `pred`.
    fn count_first(&self, keep: usize, pred: impl Fn(usize) -> bool) -> usize {
        let (b, toks) = self.first(keep);
        let whole = (0..self.bin.len())
            .filter(|&c| (self.bin[c] as usize) < b && pred(c))
            .count();
        whole + toks.into_iter().filter(|&c| pred(c)).count()
    }
}

/// The token the exact walk of `sampling::draw` chooses with `u`, or `None` when only the
/// exact walk can tell. `w`, `total`: `exp_weights` at the row's maximum `max`.
/// `bin` is scratch space.
pub(super) fn draw(
    logits: &[f32],
    w: &[f32],
    bin: &mut Vec<u16>,
    total: f64,
    max: f32,
    p: &SamplingParams,
    u: f64,
) -> Option<u32> {
    let n = logits.len();
    let k = if p.top_k == 0 { n } else { p.top_k.min(n) };
    // Positions in draw order matter only to top-k and min-p. Without them, the draw's
    // target (`u` times the mass up to top-p's cut) is crossed at or before the cut's
    // token, so no position limit is needed either (`usize::MAX` below).
    let counts = k < n || p.min_p > 0.0;
    let mut bins = Bins::new(logits, w, bin, total, (max, p.temperature), counts);
    if k < n {
        // Top-k: the candidates are the first k tokens, their weight the total.
        bins.total = bins.prefix_weight(k);
        if bins.total.is_nan() || bins.total <= 0.0 {
            return None;
        }
    }
    let total = bins.total;
    let (mut keep, mut kept_mass) = (k, None);
    if p.top_p < 1.0 {
        let (_, acc, pos) = bins.crossing(p.top_p as f64, false, k)?;
        (keep, kept_mass) = (if counts { pos } else { usize::MAX }, Some(acc));
    }
    if p.min_p > 0.0 {
        // The best token's weight is that of every token at the maximum.
        let best = logits.iter().position(|&l| l == max)?;
        let floor = w[best] as f64 / total * p.min_p as f64;
        let high = |c: usize| w[c] as f64 / total >= floor;
        let above = if k == n {
            (0..n).filter(|&c| high(c)).count()
        } else {
            bins.count_first(k, high)
        };
        if above.max(1) < keep {
            (keep, kept_mass) = (above.max(1), None);
        }
    }
    let mass = match kept_mass {
        Some(m) => m,
        None if keep == k => 1.0,
        None => bins.prefix_weight(keep) / total,
    };
    bins.crossing(u * mass, true, keep).map(|(c, ..)| c as u32)
}
