//! Unit tests of `sampling/mod.rs`: the draw against a full sort, seeds, top-k ties, penalties.

use super::*;

/// The draw from logits whose maximum is not known yet.
fn draw(logits: &[f32], p: &SamplingParams, u: f64) -> u32 {
    super::draw(logits, max_value(logits), p, u)
}

/// The draw as it was before the lazy walk (a full sort of the candidates), kept to
/// pin the seeded outputs: the fast draw must choose the same tokens.
fn draw_sorted(logits: &[f32], p: &SamplingParams, u: f64) -> u32 {
    let t = p.temperature;
    let k = if p.top_k == 0 { logits.len() } else { p.top_k };
    let cand = best(logits, k);
    let max = logits[cand[0]];
    let mut probs: Vec<f64> = cand
        .iter()
        .map(|&i| exp_fast((logits[i] - max) / t) as f64)
        .collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|x| *x /= total);
    let mut keep = probs.len();
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        for (i, x) in probs.iter().enumerate() {
            acc += x;
            if acc >= p.top_p as f64 {
                keep = i + 1;
                break;
            }
        }
    }
    if p.min_p > 0.0 {
        let floor = probs[0] * p.min_p as f64;
        keep = keep.min(probs.iter().take_while(|x| **x >= floor).count().max(1));
    }
    let total: f64 = probs[..keep].iter().sum();
    let target = u * total;
    let mut acc = 0.0;
    for (i, x) in probs[..keep].iter().enumerate() {
        acc += x;
        if target < acc {
            return cand[i] as u32;
        }
    }
    cand[keep - 1] as u32
}

#[test]
fn the_lazy_draw_chooses_what_the_full_sort_chose() {
    let mut checked = 0;
    for case in 0..240u64 {
        let n = [7usize, 100, 2_000, 49_152][case as usize % 4];
        // Logits with ties (rounded to a grid) and a long flat tail.
        let logits: Vec<f32> = (0..n as u64)
            .map(|i| {
                let r = uniform(case, i) as f32;
                ((r * r * 12.0 - 6.0) * 4.0).round() / 4.0
            })
            .collect();
        let p = SamplingParams {
            temperature: [0.3, 0.7, 1.0, 1.9][(case / 4) as usize % 4],
            top_k: [0, 1, 5, 50, 0][(case / 16) as usize % 5],
            top_p: [1.0, 0.9, 0.5][(case / 80) as usize % 3],
            min_p: if case % 3 == 0 { 0.05 } else { 0.0 },
            ..SamplingParams::default()
        };
        for step in 0..25 {
            let u = uniform(case ^ 0xABCD, step);
            assert_eq!(
                draw(&logits, &p, u),
                draw_sorted(&logits, &p, u),
                "case {case} step {step} ({p:?})"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 240 * 25);
}

fn params() -> SamplingParams {
    SamplingParams::default()
}

#[test]
fn greedy_takes_argmax_with_lowest_index_on_ties() {
    let l = [1.0, 3.0, 3.0, 0.5];
    assert_eq!(sample(&l, &params(), &History::default(), 0, None).token, 1);
}

#[test]
fn logprobs_come_from_raw_distribution() {
    let l = [0.0f32, (2.0f32).ln(), (5.0f32).ln()];
    let mut p = params();
    p.temperature = 0.5;
    p.top_k = 1;
    let s = sample(&l, &p, &History::default(), 0, Some(3));
    assert_eq!(s.token, 2);
    assert!((s.logprob.unwrap() - (5.0f32 / 8.0).ln()).abs() < 1e-6);
    assert_eq!(s.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 1, 0]);
    assert!((s.top[2].1 - (1.0f32 / 8.0).ln()).abs() < 1e-6);
}

#[test]
fn top_k_keeps_exactly_k_ties_by_index() {
    assert_eq!(best(&[1.0, 2.0, 2.0, 2.0, 0.0], 2), vec![1, 2]);
}

#[test]
fn seeded_draw_is_exact_and_stable() {
    // probs 0.1, 0.2, 0.3, 0.4 -> candidate order 3, 2, 1, 0 with cumulative
    // 0.4, 0.7, 0.9, 1.0.
    let l: Vec<f32> = [0.1f32, 0.2, 0.3, 0.4].iter().map(|x| x.ln()).collect();
    let mut p = params();
    p.temperature = 1.0;
    assert_eq!(draw(&l, &p, 0.05), 3);
    assert_eq!(draw(&l, &p, 0.45), 2);
    assert_eq!(draw(&l, &p, 0.75), 1);
    assert_eq!(draw(&l, &p, 0.95), 0);
    p.top_p = 0.6; // keeps 3 and 2 (0.4 + 0.3 >= 0.6); renormalised over 0.7
    assert_eq!(draw(&l, &p, 0.95), 2);
    assert_eq!(draw(&l, &p, 0.5), 3);
    p.top_p = 0.1; // always keeps the most likely token
    assert_eq!(draw(&l, &p, 0.99), 3);
    p.top_p = 1.0;
    p.min_p = 0.6; // floor 0.24 keeps 3 and 2
    assert_eq!(draw(&l, &p, 0.99), 2);
    // The (seed, step) stream is a pure function.
    assert_eq!(uniform(7, 3), uniform(7, 3));
    assert_ne!(uniform(7, 3), uniform(7, 4));
    assert_ne!(uniform(7, 3), uniform(8, 3));
    p.min_p = 0.0;
    let a: Vec<u32> = (0..20)
        .map(|s| sample(&l, &p, &History::default(), s, None).token)
        .collect();
    let b: Vec<u32> = (0..20)
        .map(|s| sample(&l, &p, &History::default(), s, None).token)
        .collect();
    assert_eq!(a, b);
    assert!(
        a.iter().any(|t| *t != a[0]),
        "sampling should vary across steps"
    );
}

#[test]
fn penalties_follow_openai_formulas() {
    let mut l = vec![1.0f32, 1.0, 1.0, -1.0];
    let h = History {
        prompt: vec![3],
        generated: vec![0, 0, 1],
    };
    let p = SamplingParams {
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        repetition_penalty: 2.0,
        logit_bias: vec![(2, 3.0), (1, -100.0)],
        ..params()
    };
    penalise(&mut l, &p, &h);
    // token 0: 1 - (2*0.25 + 0.5) = 0, then repetition: not > 0 -> 0 * 2 = 0
    assert_eq!(l[0], 0.0);
    // token 1 is forbidden by bias -100
    assert_eq!(l[1], f32::NEG_INFINITY);
    // token 2: unseen, +3 bias
    assert_eq!(l[2], 4.0);
    // token 3: prompt token, negative logit multiplied by the penalty
    assert_eq!(l[3], -2.0);
    assert_eq!(sample(&l, &params(), &h, 0, None).token, 2);
}

#[test]
fn temperature_zero_never_divides() {
    let l = [f32::MIN, 0.0, f32::MAX];
    let s = sample(&l, &params(), &History::default(), 0, Some(1));
    assert_eq!(s.token, 2);
    assert!(s.logprob.unwrap().is_finite());
}

#[test]
fn logprobs_are_computed_only_when_asked_for() {
    let l = [0.0f32, 2.0, 1.0];
    let mut p = params();
    for t in [0.0, 0.8] {
        p.temperature = t;
        let plain = sample(&l, &p, &History::default(), 7, None);
        let scored = sample(&l, &p, &History::default(), 7, Some(0));
        assert_eq!((plain.logprob, plain.top.len()), (None, 0));
        assert_eq!(
            plain.token, scored.token,
            "the choice does not depend on it"
        );
        let want = l[scored.token as usize] - l.iter().map(|x| x.exp()).sum::<f32>().ln();
        assert!((scored.logprob.unwrap() - want).abs() < 1e-6);
        assert!(scored.top.is_empty());
    }
}

#[test]
fn argmax_is_the_first_index_of_the_total_order_maximum() {
    // The serial definition: the first index whose value is greater than every earlier one
    // in `total_cmp`'s order.
    fn serial(v: &[f32]) -> usize {
        let mut b = 0;
        for (i, x) in v.iter().enumerate() {
            if x.total_cmp(&v[b]).is_gt() {
                b = i;
            }
        }
        b
    }
    let specials = [
        0.0,
        -0.0,
        1.5,
        -1.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
    ];
    for case in 0..400u64 {
        let n = [1usize, 2, 15, 16, 17, 33, 1000][case as usize % 7];
        let v: Vec<f32> = (0..n as u64)
            .map(|i| {
                let r = uniform(case, i);
                if r < 0.2 {
                    specials[(r * 55.0) as usize % specials.len()]
                } else {
                    // A coarse grid, so ties are common.
                    ((r * 8.0) as i32 - 4) as f32
                }
            })
            .collect();
        assert_eq!(argmax(&v), serial(&v), "case {case}: {v:?}");
        assert_eq!(best(&v, 1), vec![serial(&v)]);
    }
}

#[test]
fn the_binned_draw_answers_almost_always_and_as_the_exact_walk() {
    let (mut answered, mut cases) = (0, 0);
    for case in 0..240u64 {
        let n = [50usize, 3_000, 49_152, 262_144][case as usize % 4];
        // Peaked rows (a few tokens hold the mass), flat ones, ties, forbidden tokens.
        let spread = [2.0f32, 8.0, 30.0][(case / 4) as usize % 3];
        let logits: Vec<f32> = (0..n as u64)
            .map(|i| match uniform(case, i) {
                r if r < 0.01 => f32::NEG_INFINITY,
                r if case % 2 == 0 => (r as f32 * spread * 8.0).round() / 8.0,
                r => (r as f32).powi(6) * spread,
            })
            .collect();
        let p = SamplingParams {
            temperature: [0.2, 0.8, 1.0, 1.5][(case / 12) as usize % 4],
            top_p: [1.0, 0.95, 0.5][(case / 3) as usize % 3],
            min_p: [0.0, 0.05][(case / 5) as usize % 2],
            top_k: [0, 0, 1, 40, 1000][(case / 7) as usize % 5],
            ..SamplingParams::default()
        };
        let max = max_value(&logits);
        let mut w = vec![0f32; n];
        let total = exp_weights(&logits, max, p.temperature, &mut w);
        for step in 0..8 {
            let u = uniform(case ^ 0x5EED, step);
            // Rows on a grid (even cases) hold exact ties, where top-p's cut can fall on a
            // running sum of exactly p: the bins must leave those to the exact walk.
            cases += case % 2;
            let got = bins::draw(&logits, &w, &mut Vec::new(), total, max, &p, u);
            if let Some(t) = got {
                answered += case % 2;
                assert_eq!(
                    t,
                    draw_exact(&logits, &p, u),
                    "case {case} step {step} {p:?}"
                );
            }
        }
    }
    assert!(answered * 100 >= cases * 99, "{answered} of {cases}");
}

#[test]
fn the_binned_draw_leaves_rounding_ties_to_the_exact_walk() {
    // Two equal tokens: a target of exactly one half is where adding their probabilities
    // in another order could move the choice.
    let l = [1.0f32, 1.0, -50.0];
    let p = SamplingParams {
        temperature: 1.0,
        ..SamplingParams::default()
    };
    let max = max_value(&l);
    let mut w = vec![0f32; 3];
    let total = exp_weights(&l, max, 1.0, &mut w);
    let half = (w[0] as f64 / total) / (1.0 + 1e-15);
    assert_eq!(
        bins::draw(&l, &w, &mut Vec::new(), total, max, &p, half),
        None
    );
    assert_eq!(
        bins::draw(&l, &w, &mut Vec::new(), total, max, &p, 0.25),
        Some(0)
    );
    assert_eq!(
        bins::draw(&l, &w, &mut Vec::new(), total, max, &p, 0.75),
        Some(1)
    );
    assert_eq!(draw(&l, &p, half), draw_exact(&l, &p, half));
}

#[test]
fn the_few_best_are_those_of_the_full_sort() {
    for case in 0..40u64 {
        let n = [1_000usize, 49_152][case as usize % 2];
        let mut v: Vec<f32> = (0..n as u64)
            .map(|i| (uniform(case, i) as f32 * 6.0).round())
            .collect();
        if case % 4 == 1 {
            v[n / 2] = f32::NAN;
            v[7] = f32::INFINITY;
            v[8] = -0.0;
        }
        let k = [2usize, 5, 15][case as usize % 3];
        let mut all: Vec<usize> = (0..n).collect();
        all.sort_by(|a, b| v[*b].total_cmp(&v[*a]).then(a.cmp(b)));
        assert_eq!(best(&v, k), all[..k].to_vec(), "case {case}, k {k}");
    }
}
