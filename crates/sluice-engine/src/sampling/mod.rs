//! Per-request sampling: penalties and bias, temperature, top-k, top-p, min-p, with a
//! random stream derived from (seed, step) so a request samples the same tokens alone or
//! in any batch, in any slot (docs/ARCHITECTURE.md, "Sampling").

use sluice_kernels::{exp_fast, exp_sum, exp_weights, max_value};

mod bins;
mod top;

#[cfg(test)]
use top::argmax;
pub(crate) use top::best;

/// How one request chooses its tokens. Every field is per request; a batch mixes them.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy (argmax); never divided by.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 disables.
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p; 1 disables.
    pub top_p: f32,
    /// Drop tokens below `min_p * p_max`; 0 disables.
    pub min_p: f32,
    /// OpenAI presence penalty, over generated tokens.
    pub presence_penalty: f32,
    /// OpenAI frequency penalty, over generated tokens.
    pub frequency_penalty: f32,
    /// Multiplicative repetition penalty (1 disables), over prompt and generated tokens.
    pub repetition_penalty: f32,
    /// Added to the logit of each listed token; -100 or below forbids it.
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed of this request's random stream.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

/// The chosen token with its raw log-probability and the top alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// Chosen id.
    pub token: u32,
    /// `log_softmax(raw logits)[token]`, when asked for.
    pub logprob: Option<f32>,
    /// The `n` most likely ids under the raw distribution, best first.
    pub top: Vec<(u32, f32)>,
}

/// Tokens seen so far by one sequence, for the penalties.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Prompt ids (repetition penalty only).
    pub prompt: Vec<u32>,
    /// Generated ids.
    pub generated: Vec<u32>,
}

/// splitmix64: a small, well-mixed hash used to derive per-step random numbers.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The uniform number in [0, 1) for (seed, step): the `fold_in(seed, step)` random stream
/// of docs/ARCHITECTURE.md, "Sampling".
pub fn uniform(seed: u64, step: u64) -> f64 {
    (mix(mix(seed) ^ step) >> 11) as f64 / (1u64 << 53) as f64
}

/// `log_softmax` of the raw logits: the log-probability of `token` and the best `n`
/// tokens with theirs.
pub fn scores(logits: &[f32], n: usize, token: u32) -> (f32, Vec<(u32, f32)>) {
    scores_at(logits, max_value(logits), n, token)
}

/// As `scores`, with the logits' maximum already known.
fn scores_at(logits: &[f32], max: f32, n: usize, token: u32) -> (f32, Vec<(u32, f32)>) {
    let lse = max + exp_sum(logits, max).ln();
    let top = best(logits, n)
        .into_iter()
        .map(|i| (i as u32, logits[i] - lse))
        .collect();
    (logits[token as usize] - lse, top)
}

/// Applies penalties and logit bias in place (OpenAI's documented formulas, vLLM's
/// repetition penalty).
fn penalise(logits: &mut [f32], p: &SamplingParams, h: &History) {
    if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
        let mut counts = std::collections::HashMap::<u32, f32>::new();
        for &t in &h.generated {
            *counts.entry(t).or_default() += 1.0;
        }
        for (t, c) in counts {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= c * p.frequency_penalty + p.presence_penalty;
            }
        }
    }
    if p.repetition_penalty != 1.0 {
        let seen: std::collections::HashSet<u32> =
            h.prompt.iter().chain(&h.generated).copied().collect();
        for t in seen {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = if *l > 0.0 {
                    *l / p.repetition_penalty
                } else {
                    *l * p.repetition_penalty
                };
            }
        }
    }
    for &(t, b) in &p.logit_bias {
        if let Some(l) = logits.get_mut(t as usize) {
            *l = if b <= -100.0 {
                f32::NEG_INFINITY
            } else {
                *l + b
            };
        }
    }
}

/// Chooses the next token of a sequence at generation step `step` and, with `Some(n_top)`,
/// reports its raw log-probability and `n_top` raw alternatives (`None` skips them: the
/// softmax normaliser is a pass over the vocabulary that a plain greedy choice does not
/// need). `logits` is the model's raw output and is left untouched.
pub fn sample(
    logits: &[f32],
    p: &SamplingParams,
    h: &History,
    step: u64,
    n_top: Option<usize>,
) -> Sampled {
    sample_with(logits, p, h, step, n_top, None::<fn(&mut [f32])>)
}

/// As `sample`, with `restrict` (if any) applied to the penalised logits before the choice (a
/// grammar's mask sets forbidden tokens to -inf); log-probabilities stay those of the raw
/// distribution.
pub fn sample_with(
    logits: &[f32],
    p: &SamplingParams,
    h: &History,
    step: u64,
    n_top: Option<usize>,
    restrict: Option<impl FnOnce(&mut [f32])>,
) -> Sampled {
    let plain = p.presence_penalty == 0.0
        && p.frequency_penalty == 0.0
        && p.repetition_penalty == 1.0
        && p.logit_bias.is_empty();
    // The raw logits themselves when nothing changes them (no copy of the vocabulary).
    let work: std::borrow::Cow<[f32]> = match restrict {
        None if plain => std::borrow::Cow::Borrowed(logits),
        restrict => {
            let mut w = logits.to_vec();
            penalise(&mut w, p, h);
            if let Some(r) = restrict {
                r(&mut w);
            }
            std::borrow::Cow::Owned(w)
        }
    };
    // The raw maximum, when the draw or the log-probabilities need it: one pass, shared
    // when the draw is from the raw logits.
    let mut raw_max = None;
    let token = if p.temperature <= 0.0 {
        best(&work, 1)[0] as u32
    } else {
        let max = max_value(&work);
        if matches!(work, std::borrow::Cow::Borrowed(_)) {
            raw_max = Some(max);
        }
        draw(&work, max, p, uniform(p.seed, step))
    };
    let (logprob, top) = match n_top {
        Some(n) => {
            let max = raw_max.unwrap_or_else(|| max_value(logits));
            let (logprob, top) = scores_at(logits, max, n, token);
            (Some(logprob), top)
        }
        None => (None, Vec::new()),
    };
    Sampled {
        token,
        logprob,
        top,
    }
}

/// Candidates in draw order (logit descending, lower id first on ties), sorted lazily: the
/// best `m` are selected from the rest and sorted only when the walk reaches them, so a draw
/// costs a pass over the vocabulary, not a sort of it.
struct Ranked<'a> {
    logits: &'a [f32],
    rest: Vec<usize>,
    sorted: Vec<usize>,
    /// The rest not yet listed: every token of the vocabulary not in `sorted` (built on
    /// first need, so most draws never list the vocabulary).
    unlisted: bool,
}

impl<'a> Ranked<'a> {
    fn order(logits: &[f32], a: usize, b: usize) -> std::cmp::Ordering {
        logits[b].total_cmp(&logits[a]).then(a.cmp(&b))
    }

    /// Sorts `v` by `order` through one integer key per token (logit descending in
    /// `total_cmp`'s order, then index), without the indirect comparisons.
    fn sort(logits: &[f32], v: &mut [usize]) {
        let mut keys: Vec<u64> = v
            .iter()
            .map(|&i| {
                let b = logits[i].to_bits();
                let ascending = if b >> 31 == 1 { !b } else { b | 1 << 31 };
                (u64::from(!ascending) << 32) | i as u64
            })
            .collect();
        keys.sort_unstable();
        for (x, k) in v.iter_mut().zip(keys) {
            *x = (k & 0xFFFF_FFFF) as usize;
        }
    }

    /// Candidate `i` in draw order, if there are that many.
    /// The candidates after `sorted`, listed.
    fn rest(&mut self) -> &[usize] {
        if self.unlisted {
            self.unlisted = false;
            let mut listed = vec![false; self.logits.len()];
            for &i in &self.sorted {
                listed[i] = true;
            }
            self.rest = (0..self.logits.len()).filter(|&i| !listed[i]).collect();
        }
        &self.rest
    }

    fn get(&mut self, i: usize) -> Option<usize> {
        if i >= self.sorted.len() && !self.rest().is_empty() {
            // Grow geometrically: 64, then 4x what is sorted.
            let want = (self.sorted.len() * 4).max(64).max(i + 1);
            let take = (want - self.sorted.len()).min(self.rest.len());
            let l = self.logits;
            if take < self.rest.len() {
                self.rest
                    .select_nth_unstable_by(take - 1, |a, b| Self::order(l, *a, *b));
            }
            let mut chunk: Vec<usize> = self.rest.drain(..take).collect();
            Self::sort(l, &mut chunk);
            self.sorted.extend(chunk);
        }
        self.sorted.get(i).copied()
    }
}

thread_local! {
    /// A row's weights and bins, kept per thread: two vocabulary-sized buffers that a
    /// draw overwrites whole, so no row allocates (or zeroes) them again.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<u16>)> = const {
        std::cell::RefCell::new((Vec::new(), Vec::new()))
    };
}

/// Temperature, then top-k, top-p and min-p over the candidates, then inverse-CDF
/// sampling with `u` in candidate order (best first, ties by index). The binned walk
/// (`bins.rs`) finds the token without sorting; it gives up near rounding ties, where
/// the exact walk decides.
/// `max`: the logits' maximum.
fn draw(logits: &[f32], max: f32, p: &SamplingParams, u: f64) -> u32 {
    if max.is_finite() {
        let fast = SCRATCH.with_borrow_mut(|(w, bin)| {
            w.resize(logits.len(), 0.0);
            let total = exp_weights(logits, max, p.temperature, w);
            if total.is_finite() && total > 0.0 {
                bins::draw(logits, w, bin, total, max, p, u)
            } else {
                None
            }
        });
        if let Some(token) = fast {
            return token;
        }
    }
    draw_exact(logits, p, u)
}

/// `draw` token by token: the candidates are walked in draw order only as far as the draw
/// needs (docs/ARCHITECTURE.md, "Sampling").
fn draw_exact(logits: &[f32], p: &SamplingParams, u: f64) -> u32 {
    let t = p.temperature;
    let n = logits.len();
    let k = if p.top_k == 0 { n } else { p.top_k.min(n) };
    let whole = k == n;
    let mut cand: Vec<usize> = Vec::new();
    let best = if whole {
        // The highest logit (a vectorised pass), then the lowest index holding it.
        let m = max_value(logits);
        (0..n)
            .filter(|&i| logits[i] == m || logits[i].is_nan())
            .min_by(|a, b| Ranked::order(logits, *a, *b))
            .unwrap_or(0)
    } else {
        cand = (0..n).collect();
        cand.select_nth_unstable_by(k - 1, |a, b| Ranked::order(logits, *a, *b));
        cand.truncate(k);
        *cand
            .iter()
            .min_by(|a, b| Ranked::order(logits, **a, **b))
            .expect("at least one candidate")
    };
    let max = logits[best];
    // Weights exp((l - max) / t) in f32 (the vectorised exp), the normaliser in f64.
    let mut w = vec![0f32; if whole { n } else { 0 }];
    let total: f64 = if whole {
        // A forbidden token (-inf) weighs exactly nothing.
        exp_weights(logits, max, t, &mut w)
    } else {
        cand.iter()
            .map(|&i| match logits[i] {
                f32::NEG_INFINITY => 0.0,
                l => exp_fast((l - max) / t) as f64,
            })
            .sum()
    };
    let weight = |i: usize| {
        if whole {
            w[i] as f64
        } else if logits[i] == f32::NEG_INFINITY {
            0.0
        } else {
            exp_fast((logits[i] - max) / t) as f64
        }
    };
    let prob = |i: usize| weight(i) / total;
    let mut ranked = if whole {
        // The walk below needs the best tokens up to `need` of the mass (top-p's cut, or
        // the draw's target). The tokens within 2, 4, 8, ... nats (x t) of the best are a
        // prefix of the order; the first such set holding `need` is sorted at once, and the
        // lazy ranking takes over if rounding makes the walk go further.
        let need = if p.top_p < 1.0 { p.top_p as f64 } else { u } * total * (1.0 + 1e-9);
        let mut floor = f32::NEG_INFINITY;
        for d in [2.0f32, 4.0, 8.0, 16.0, 32.0] {
            let cut = max - d * t;
            let mut sums = [0f64; 8];
            for (wc, lc) in w.chunks(8).zip(logits.chunks(8)) {
                for ((wi, l), s) in wc.iter().zip(lc).zip(sums.iter_mut()) {
                    *s += if *l >= cut { *wi as f64 } else { 0.0 };
                }
            }
            if sums.iter().sum::<f64>() >= need {
                floor = cut;
                break;
            }
        }
        Ranked {
            logits,
            sorted: (0..n).filter(|&i| logits[i] >= floor).collect(),
            rest: Vec::new(),
            unlisted: true,
        }
    } else {
        Ranked {
            logits,
            sorted: cand,
            rest: Vec::new(),
            unlisted: false,
        }
    };
    Ranked::sort(logits, &mut ranked.sorted);
    // How many of the best candidates are kept, and their probability mass.
    let mut keep = k;
    let mut kept_mass = None;
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        let mut i = 0;
        while let Some(c) = ranked.get(i) {
            acc += prob(c);
            i += 1;
            if acc >= p.top_p as f64 {
                keep = i;
                kept_mass = Some(acc);
                break;
            }
        }
    }
    if p.min_p > 0.0 {
        // Probabilities fall along the order, so the kept prefix is every candidate at or
        // above the floor.
        let floor = prob(best) * p.min_p as f64;
        ranked.rest();
        let above = ranked
            .sorted
            .iter()
            .chain(&ranked.rest)
            .filter(|&&c| prob(c) >= floor)
            .count();
        if above.max(1) < keep {
            keep = above.max(1);
            kept_mass = None;
        }
    }
    let mass = match kept_mass {
        Some(m) => m,
        None if keep == k => 1.0,
        None => (0..keep).map(|i| prob(ranked.get(i).expect("kept"))).sum(),
    };
    let target = u * mass;
    let mut acc = 0.0;
    // If rounding leaves the target past the last sum, the last candidate that has any
    // probability is the answer (never a forbidden one).
    let mut last = best;
    for i in 0..keep {
        let c = ranked.get(i).expect("kept candidates exist");
        let q = prob(c);
        acc += q;
        if q > 0.0 {
            last = c;
        }
        if target < acc {
            return c as u32;
        }
    }
    last as u32
}

#[cfg(test)]
mod tests;
