//! What one engine step does: a pure function of the running sequences' needs, the free
//! blocks and the token budget, returning which sequences decode, how many prompt rows
//! each prefilling one computes, and which sequences give their blocks back (preemption
//! by recompute) (docs/ARCHITECTURE.md, "The step plan"). The worker carries the plan out.

use super::chunk::{chunk_cost, chunk_rows};
use crate::cache::blocks_for;

/// One running sequence as the planner sees it. Sequences come oldest first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Need {
    /// Rows it decodes (0 while it prefills or waits): 1, or one per live beam.
    pub decode: usize,
    /// Blocks its decode rows take (new ones and copies of shared ones).
    pub decode_blocks: usize,
    /// Drafted tokens it would verify after its decode row (speculative decoding), and
    /// the further blocks they take. Granted whole or not at all, only from what decode
    /// rows and prompt chunks leave: drafts never preempt anyone nor delay a prompt.
    pub drafts: usize,
    pub draft_blocks: usize,
    /// Prompt (or recompute) positions: computed so far, and where its prefill ends
    /// (equal when it decodes).
    pub computed: usize,
    pub prefill_end: usize,
    /// Blocks its table holds.
    pub held: usize,
    /// Whether the block at `computed` is shared, so its first prefill row costs a copy.
    pub copy_first: bool,
    /// Blocks that become available if it is preempted.
    pub frees: usize,
    /// Whether it may be preempted (a beam search may not).
    pub preemptible: bool,
    /// It is parked (preempted) and takes no part in this step.
    pub parked: bool,
}

/// The step to run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// Per sequence: rows it computes this step (decode rows with any drafts granted, or
    /// prompt positions from `computed`).
    pub rows: Vec<usize>,
    /// Sequences to preempt before the step, newest first: they let go of their blocks
    /// and compute their tokens again later.
    pub preempt: Vec<usize>,
}

/// Blocks prompt rows `computed..computed + rows` of `n` take.
fn prefill_blocks(n: &Need, rows: usize) -> usize {
    let new = blocks_for(n.computed + rows).saturating_sub(n.held);
    new + usize::from(rows > 0 && n.copy_first)
}

/// Plans a step. Decode rows first, oldest first, and when their blocks do not fit, the
/// newest preemptible sequences are preempted until they do. Then prompt chunks, oldest
/// first, within the `budget` of token units (`break_even`: see `chunk_rows`) and the
/// blocks left; a chunk that finds too few blocks is cut to what fits, and the prompts
/// after it wait. Then drafts to verify, from the blocks and budget left. When nothing at
/// all could run, the newest sequence other than the
/// oldest is preempted, and so on: the oldest always progresses.
pub fn plan_step(needs: &[Need], available: usize, budget: usize, break_even: usize) -> StepPlan {
    let mut out = StepPlan {
        rows: vec![0; needs.len()],
        preempt: Vec::new(),
    };
    let mut gone = vec![false; needs.len()];
    let mut avail = available;
    // The sequence a preemption spares: the oldest live one, unless a beam search (never
    // preempted) is live, which then is the one that progresses.
    let spare = |gone: &[bool]| {
        let live = |i: &usize| !gone[*i] && !needs[*i].parked;
        if (0..needs.len()).filter(live).any(|i| !needs[i].preemptible) {
            return None;
        }
        (0..needs.len()).find(live)
    };
    // Preempts the newest live preemptible sequence other than `keep`; false if none.
    let mut preempt_newest = |gone: &mut Vec<bool>, avail: &mut usize, keep: Option<usize>| {
        let victim = (0..needs.len())
            .rev()
            .find(|&i| !gone[i] && !needs[i].parked && needs[i].preemptible && Some(i) != keep);
        let Some(v) = victim else {
            return false;
        };
        gone[v] = true;
        *avail += needs[v].frees;
        out.preempt.push(v);
        true
    };
    loop {
        let decoding = |gone: &[bool]| -> Vec<usize> {
            (0..needs.len())
                .filter(|&i| !gone[i] && !needs[i].parked && needs[i].decode > 0)
                .collect()
        };
        let want: usize = decoding(&gone)
            .iter()
            .map(|&i| needs[i].decode_blocks)
            .sum();
        if want > avail {
            let keep = decoding(&gone)
                .first()
                .copied()
                .filter(|_| spare(&gone).is_some());
            if preempt_newest(&mut gone, &mut avail, keep) {
                continue;
            }
        }
        // Decode rows, oldest first, while their blocks last.
        let mut left = avail;
        let mut rows = vec![0; needs.len()];
        let mut units = budget;
        for i in decoding(&gone) {
            let n = &needs[i];
            if n.decode_blocks <= left && n.decode <= units {
                left -= n.decode_blocks;
                units -= n.decode;
                rows[i] = n.decode;
            }
        }
        // Prompt chunks, oldest first.
        for (i, n) in needs.iter().enumerate() {
            if gone[i] || n.parked || n.decode > 0 || n.computed >= n.prefill_end || units == 0 {
                continue;
            }
            let most = chunk_rows(n.computed, n.prefill_end - n.computed, units, break_even);
            let mut r = most;
            while r > 0 && prefill_blocks(n, r) > left {
                // Cut to the blocks left: whole blocks, then the last one's rows.
                let fit = (n.held + left.saturating_sub(usize::from(n.copy_first)))
                    * sluice_kernels::KEY_BLOCK;
                r = fit.saturating_sub(n.computed).min(r - 1);
            }
            if r == 0 {
                break;
            }
            left -= prefill_blocks(n, r);
            units = units.saturating_sub(chunk_cost(n.computed, r, break_even));
            rows[i] = r;
            if r < most {
                break;
            }
        }
        // Drafts, oldest first, from what the decode rows and prompt chunks left.
        for i in decoding(&gone) {
            let n = &needs[i];
            if rows[i] > 0 && n.drafts > 0 && n.draft_blocks <= left && n.drafts <= units {
                left -= n.draft_blocks;
                units -= n.drafts;
                rows[i] += n.drafts;
            }
        }
        let live = (0..needs.len()).any(|i| !gone[i] && !needs[i].parked);
        if rows.iter().all(|&r| r == 0) && live {
            let keep = spare(&gone);
            if preempt_newest(&mut gone, &mut avail, keep) {
                continue;
            }
        }
        out.rows = rows;
        return out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoding(computed: usize, held: usize, frees: usize) -> Need {
        Need {
            decode: 1,
            decode_blocks: usize::from(computed >= held * 16),
            computed,
            prefill_end: computed,
            held,
            frees,
            preemptible: true,
            ..Default::default()
        }
    }

    fn prefilling(computed: usize, end: usize, held: usize) -> Need {
        Need {
            computed,
            prefill_end: end,
            held,
            frees: held,
            preemptible: true,
            ..Default::default()
        }
    }

    #[test]
    fn decode_rows_go_first_and_prompts_take_the_rest_of_the_budget() {
        let needs = [
            decoding(20, 2, 2),
            prefilling(0, 100, 0),
            prefilling(0, 100, 0),
        ];
        let p = plan_step(&needs, 100, 64, 0);
        assert_eq!(p.rows, vec![1, 63, 0]);
        assert!(p.preempt.is_empty());
    }

    #[test]
    fn a_chunk_is_cut_to_the_blocks_left_and_later_prompts_wait() {
        // Two blocks left: the prompt computes 32 rows (it holds none yet).
        let needs = [prefilling(0, 100, 0), prefilling(0, 10, 0)];
        let p = plan_step(&needs, 2, 512, 0);
        assert_eq!(p.rows, vec![32, 0]);
        // A prompt whose first row writes into a shared block pays a copy for it.
        let mut n = prefilling(18, 40, 2);
        n.copy_first = true;
        assert_eq!(plan_step(&[n], 2, 512, 0).rows, vec![22]);
        // With one block left, the copy takes it: the rows up to the held blocks' end.
        assert_eq!(plan_step(&[n], 1, 512, 0).rows, vec![14]);
    }

    #[test]
    fn when_decode_blocks_run_out_the_newest_is_preempted() {
        // Three sequences each need a new block; one block is free.
        let needs = [decoding(32, 2, 2), decoding(16, 1, 1), decoding(48, 3, 3)];
        let p = plan_step(&needs, 1, 64, 0);
        assert_eq!(p.preempt, vec![2]);
        assert_eq!(p.rows, vec![1, 1, 0]);
    }

    #[test]
    fn a_beam_search_is_never_preempted_even_the_oldest_gives_way() {
        let mut beams = decoding(32, 2, 2);
        beams.preemptible = false;
        let needs = [decoding(16, 1, 1), beams];
        let p = plan_step(&needs, 0, 64, 0);
        assert_eq!(p.preempt, vec![0]);
        assert_eq!(p.rows, vec![0, 1]);
    }

    #[test]
    fn when_nothing_could_run_the_newest_gives_way_to_the_oldest() {
        // Two prompts hold every block, both need more.
        let needs = [prefilling(16, 100, 1), prefilling(16, 100, 1)];
        let p = plan_step(&needs, 0, 512, 0);
        assert_eq!(p.preempt, vec![1]);
        assert_eq!(p.rows, vec![16, 0]);
    }

    #[test]
    fn parked_sequences_take_no_part() {
        let mut parked = prefilling(0, 50, 0);
        parked.parked = true;
        let needs = [parked, decoding(5, 1, 1)];
        let p = plan_step(&needs, 0, 64, 0);
        assert_eq!(p.rows, vec![0, 1]);
    }

    #[test]
    fn drafts_take_only_what_decode_rows_leave_and_never_preempt() {
        let mut a = decoding(20, 2, 2);
        a.drafts = 4;
        let mut b = decoding(15, 1, 1);
        b.drafts = 4;
        b.draft_blocks = 1;
        // Budget 7: both decode rows (2), then a's drafts (4); b's do not fit.
        assert_eq!(plan_step(&[a, b], 0, 7, 0).rows, vec![5, 1]);
        // b's drafts need a block that is not there; nobody is preempted for them.
        let p = plan_step(&[b, a], 0, 64, 0);
        assert_eq!(p.rows, vec![1, 5]);
        assert!(p.preempt.is_empty());
        // Prompt chunks come before drafts: a prompt is never delayed by a guess.
        let p = plan_step(&[a, prefilling(0, 100, 0)], 100, 10, 0);
        assert_eq!(p.rows, vec![1, 9]);
        let p = plan_step(&[a, prefilling(0, 4, 0)], 100, 10, 0);
        assert_eq!(p.rows, vec![5, 4]);
    }

    #[test]
    fn the_budget_limits_decode_rows_too() {
        let needs = [decoding(5, 1, 1), decoding(5, 1, 1)];
        assert_eq!(plan_step(&needs, 0, 1, 0).rows, vec![1, 0]);
    }
}
