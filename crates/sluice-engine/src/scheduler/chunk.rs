//! How much of a prompt one step prefills: a pure function of where the prompt stands, the
//! step's token budget and the model's attention cost (docs/ARCHITECTURE.md, "Chunked
//! prefill").

/// Prompt rows from position `from` (at most `left` of them) that fit in `budget` token
/// units, a row at position `p` costing `1 + p / break_even` units: its weights cost one
/// unit and its attention over `p` earlier positions grows with `p` (`break_even` is the
/// context at which both cost the same; 0 counts every row as one unit). So a chunk late
/// in a long prompt takes about as long as one at its start, and a step's time stays
/// bounded. At least one row, when `budget` and `left` allow any.
pub fn chunk_rows(from: usize, left: usize, budget: usize, break_even: usize) -> usize {
    if break_even == 0 {
        return left.min(budget);
    }
    // In units of 1 / break_even: a row costs break_even + p, the budget budget x break_even.
    let (k, mut room) = (break_even as u128, budget as u128 * break_even as u128);
    let mut rows = 0;
    while rows < left {
        let cost = k + (from + rows) as u128;
        if cost > room {
            break;
        }
        room -= cost;
        rows += 1;
    }
    rows.max(usize::from(budget > 0 && left > 0))
}

/// The token units `rows` prompt rows from position `from` take of a budget (rounded up).
pub fn chunk_cost(from: usize, rows: usize, break_even: usize) -> usize {
    if break_even == 0 || rows == 0 {
        return rows;
    }
    // Σ (k + p) for p in from..from+rows, over k.
    let k = break_even as u128;
    let (a, n) = (from as u128, rows as u128);
    let sum = n * k + n * a + n * (n - 1) / 2;
    sum.div_ceil(k) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_cost_model_every_row_is_one_unit() {
        assert_eq!(chunk_rows(1000, 500, 56, 0), 56);
        assert_eq!(chunk_rows(0, 10, 56, 0), 10);
        assert_eq!(chunk_cost(1000, 56, 0), 56);
    }

    #[test]
    fn rows_late_in_a_prompt_cost_more() {
        // At position 0 a row costs about one unit; at the break-even context, two.
        assert_eq!(chunk_rows(0, 1500, 48, 1000), 46);
        let late = chunk_rows(1000, 500, 48, 1000);
        assert_eq!(late, 23);
        assert!(chunk_cost(1000, late, 1000) <= 48);
        assert!(chunk_cost(1000, late + 1, 1000) > 48);
        assert_eq!(chunk_rows(1000, 10, 48, 1000), 10);
    }

    #[test]
    fn a_step_always_moves_a_prompt_on() {
        // One row even when it alone exceeds the budget; none without a budget or a prompt.
        assert_eq!(chunk_rows(1 << 20, 100, 1, 16), 1);
        assert_eq!(chunk_rows(5, 100, 0, 16), 0);
        assert_eq!(chunk_rows(5, 0, 10, 16), 0);
    }

    #[test]
    fn cost_is_the_sum_of_the_rows() {
        for (from, rows, k) in [(0, 1, 7), (3, 40, 100), (1999, 17, 1686), (0, 64, 1)] {
            let exact: f64 = (from..from + rows).map(|p| 1.0 + p as f64 / k as f64).sum();
            assert_eq!(
                chunk_cost(from, rows, k),
                exact.ceil() as usize,
                "{from} {rows} {k}"
            );
        }
    }
}
