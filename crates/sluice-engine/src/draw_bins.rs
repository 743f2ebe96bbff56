//! `sampling::draw` without sorting the candidates: the running probability in draw
//! order (logit descending, lower id first) is found bin by bin. Tokens fall into bins of
//! 1/16 nat (x temperature) below the best logit (rounded to the nearest); the bins'
//! masses give, in one pass, where top-p's cut and the draw's target fall, and only the
//! tokens of those bins are sorted. The exact walk adds token probabilities one by one; the
//! bins add them in another order, so sums differ by rounding (about 1e-11 at most for
//! 262,144 tokens). Whenever a cut or the target lies within `MARGIN` of a running sum,
//! where that rounding could put it on the other side, this gives up and the exact walk
//! decides: the chosen token is always the exact walk's (docs/ARCHITECTURE.md,
//! "Sampling").

use super::{Ranked, SamplingParams};

/// Bins: 32 nats below the best logit; every token further down goes to the last bin.
const BINS: usize = 512;
const PER_NAT: f32 = 16.0;
/// Far above the rounding of any sum of probabilities here, far below any gap a draw
/// is likely to land in.
const MARGIN: f64 = 1e-9;

pub(super) struct Bins<'a> {
    logits: &'a [f32],
    w: &'a [f32],
    total: f64,
    bin: Vec<u16>,
    mass: Vec<f64>,
    count: Vec<usize>,
}

impl<'a> Bins<'a> {
    /// `w` and `total` as `exp_weights` gives them for `max` and temperature `t`; the
    /// logits hold no NaN.
    pub(super) fn new(logits: &'a [f32], w: &'a [f32], total: f64, max: f32, t: f32) -> Self {
        let mut bin = vec![0u16; logits.len()];
        sluice_kernels::bin_indices(logits, max, PER_NAT / t, (BINS - 1) as u16, &mut bin);
        // Four interleaved histograms, so that neighbouring tokens in one bin do not wait
        // on each other's additions.
        let mut mass = vec![[0f64; 4]; BINS];
        let mut count = vec![[0usize; 4]; BINS];
        for (i, (&k, &wi)) in bin.iter().zip(w).enumerate() {
            mass[k as usize][i % 4] += wi as f64;
            count[k as usize][i % 4] += 1;
        }
        Self {
            logits,
            w,
            total,
            bin,
            mass: mass.iter().map(|m| (m[0] + m[1]) + (m[2] + m[3])).collect(),
            count: count.iter().map(|c| c.iter().sum()).collect(),
        }
    }

    /// Bin `b`'s tokens in draw order.
    fn sorted(&self, b: usize) -> Vec<usize> {
        let mut toks: Vec<usize> = (0..self.logits.len())
            .filter(|&i| self.bin[i] as usize == b)
            .collect();
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

    /// The probability of the first `keep` tokens in draw order.
    fn prefix_mass(&self, keep: usize) -> f64 {
        let (mut mass, mut pos) = (0.0, 0);
        for b in 0..BINS {
            if pos + self.count[b] <= keep {
                (mass, pos) = (mass + self.mass[b] / self.total, pos + self.count[b]);
                continue;
            }
            for c in self.sorted(b).into_iter().take(keep - pos) {
                mass += self.w[c] as f64 / self.total;
            }
            break;
        }
        mass
    }
}

/// The token the exact walk of `sampling::draw` chooses with `u`, over every token (no
/// top-k), or `None` when only the exact walk can tell. `w`, `total`: `exp_weights` at
/// the row's maximum `max`.
pub(super) fn draw(
    logits: &[f32],
    w: &[f32],
    total: f64,
    max: f32,
    p: &SamplingParams,
    u: f64,
) -> Option<u32> {
    let n = logits.len();
    let bins = Bins::new(logits, w, total, max, p.temperature);
    let (mut keep, mut kept_mass) = (n, None);
    if p.top_p < 1.0 {
        let (_, acc, pos) = bins.crossing(p.top_p as f64, false, n)?;
        (keep, kept_mass) = (pos, Some(acc));
    }
    if p.min_p > 0.0 {
        // The best token's weight is that of every token at the maximum.
        let best = logits.iter().position(|&l| l == max)?;
        let floor = w[best] as f64 / total * p.min_p as f64;
        let above = w.iter().filter(|&&x| x as f64 / total >= floor).count();
        if above.max(1) < keep {
            (keep, kept_mass) = (above.max(1), None);
        }
    }
    let mass = match kept_mass {
        Some(m) => m,
        None if keep == n => 1.0,
        None => bins.prefix_mass(keep),
    };
    bins.crossing(u * mass, true, keep).map(|(c, ..)| c as u32)
}
