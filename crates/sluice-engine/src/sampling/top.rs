//! The best few of a logits row in `f32::total_cmp`'s order (ties by lower index):
//! greedy's argmax, the top alternatives reported with log-probabilities, and beam
//! search's candidates. Integer keys keep the passes vectorised.

/// `f32::total_cmp`'s order as a signed integer: `a.total_cmp(&b) == key(a).cmp(&key(b))`.
#[inline(always)]
fn total_key(x: f32) -> i32 {
    let b = x.to_bits() as i32;
    b ^ (((b >> 31) as u32) >> 1) as i32
}

/// The first index of the largest value in `total_cmp`'s order: two passes over integer
/// keys (a maximum, then the first index holding it), both vectorised, where comparing
/// each value with the best so far is a serial chain (a 262,144-token vocabulary is read on
/// every greedy step).
pub(super) fn argmax(values: &[f32]) -> usize {
    let mut lanes = [i32::MIN; 16];
    for c in values.chunks(16) {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l = (*l).max(total_key(*x));
        }
    }
    let top = lanes.into_iter().max().unwrap_or(i32::MIN);
    values
        .iter()
        .position(|x| total_key(*x) == top)
        .unwrap_or(0)
}

/// Indices of the `k` largest values, best first, ties broken by lower index.
pub(crate) fn best(values: &[f32], k: usize) -> Vec<usize> {
    let k = k.min(values.len());
    if k == 0 {
        return Vec::new();
    }
    if k == 1 {
        return vec![argmax(values)];
    }
    if k <= 64 && values.len() >= 64 * k {
        return best_few(values, k);
    }
    let order = |a: &usize, b: &usize| values[*b].total_cmp(&values[*a]).then(a.cmp(b));
    let mut idx: Vec<usize> = (0..values.len()).collect();
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, order);
        idx.truncate(k);
    }
    idx.sort_by(order);
    idx
}

/// `best` for a few of many values: one pass keeping the `k` best so far, where a chunk of
/// 16 whose largest key does not beat the k-th best is passed over after one vectorised
/// comparison (after the first chunks, nearly all of them).
fn best_few(values: &[f32], k: usize) -> Vec<usize> {
    // (key, index), best first: keys descending, then indices ascending.
    let mut top: Vec<(i32, usize)> = Vec::with_capacity(k + 1);
    let mut bar = None;
    for (c, chunk) in values.chunks(16).enumerate() {
        let most = chunk.iter().fold(i32::MIN, |m, &x| m.max(total_key(x)));
        if bar.is_some_and(|b| most <= b) {
            continue;
        }
        for (j, &x) in chunk.iter().enumerate() {
            let key = total_key(x);
            // An equal key already kept has a lower index, so it stays ahead.
            if bar.is_some_and(|b| key <= b) {
                continue;
            }
            let at = top.partition_point(|&(kept, _)| kept >= key);
            top.insert(at, (key, c * 16 + j));
            top.truncate(k);
            bar = (top.len() == k).then(|| top[k - 1].0);
        }
    }
    top.into_iter().map(|(_, i)| i).collect()
}
