//! How one parallel matmul region (`QLinear::matmul_many`: one or more matrices against
//! the same activation rows) is cut into tasks for the compute threads (`threads.rs`).
//!
//! `threads::for_each` gives thread `k` of `t` the `k`-th contiguous run of the tasks as
//! its share; it works through its share front to back, and the thread done first takes
//! the other's tasks one at a time from the back. So the plan decides both how the work
//! is shared and how long a thread can be left waiting for the other's last task.
//!
//! - Much work (an output head, a batch of many streams, a prompt): tasks of at most about
//!   `TASK_WORK` multiply-adds, at least 4 a thread, and a long batch's activation rows
//!   split in runs of `SPLIT_ROWS` too.
//! - Little work (a decode step's q/k/v, o, gate/up and down): each thread's share of the
//!   weight groups is cut into tasks that halve, 1/2, 1/4, 1/8, 1/16 and 1/16 of it
//!   (`halving`). The owner streams its big tasks first; the thread done first steals the
//!   other's smallest, so it waits at most about a 32nd of the region for the other's last
//!   task instead of an 8th. A task may span the end of one matrix and the start of the
//!   next. Each thread's share is exactly its contiguous fraction of the groups, which is
//!   what an idle helper fetched ahead (`ahead.rs`).

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::layout::Part;

/// Activation rows per task of a matmul over a long batch (a multiple of every kernel's
/// row tile: 3 or 4 on AVX2, 8 on AVX-512).
pub(crate) const SPLIT_ROWS: usize = 48;

/// Multiply-adds a matmul task takes at most, unless that makes fewer than 4 tasks a
/// thread: 10-25 µs, against about a µs to hand a task out. (4M made the caller wait
/// for the last task 2.1-2.7% of a 32-slot SmolLM2 step, 1M 1.5-1.9%: perf.)
const TASK_WORK: usize = 1 << 20;

/// Halvings of a thread's share at most (5 tasks: 1/2 .. 1/16, 1/16).
const HALVINGS: u32 = 4;

static HALVING: AtomicBool = AtomicBool::new(true);

/// Turns the halving tasks of little work on or off (off: equal tasks, 4 a thread): the
/// knob `benches/forward.rs` (`:even`) turns to compare both in one process. Results
/// never depend on it.
pub fn set_halving(on: bool) {
    HALVING.store(on, Ordering::Relaxed);
}

/// The tasks of one region: task `t` runs `parts[bounds[t]..bounds[t + 1]]`, each a
/// (matrix index, groups and activation rows of it).
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) parts: Vec<(usize, Part)>,
    bounds: Vec<usize>,
}

impl Plan {
    /// Tasks.
    pub(crate) fn len(&self) -> usize {
        self.bounds.len() - 1
    }

    /// Task `t`'s parts.
    pub(crate) fn task(&self, t: usize) -> &[(usize, Part)] {
        &self.parts[self.bounds[t]..self.bounds[t + 1]]
    }

    /// Ends the task begun at the last `end_task`.
    fn end_task(&mut self) {
        self.bounds.push(self.parts.len());
    }
}

/// Plans kept per thread (the most recently made; a decode step asks for one per matmul
/// shape, the same in every layer).
const KEPT: usize = 32;

/// What a plan is made from: the matrices' groups, the work, rows, threads and whether
/// little work halves.
type Key = (Vec<usize>, usize, usize, usize, bool);

thread_local! {
    static PLANS: RefCell<Vec<(Key, Rc<Plan>)>> = const { RefCell::new(Vec::new()) };
}

/// [`plan`], made once per thread for each set of arguments and kept: a decode step's
/// matmuls ask for the same few plans in every layer, and making one (a few allocations,
/// a few hundred ns when hot) ran on the caller while the helpers waited, between
/// quantising the input and starting the region: on the 2-vCPU AMD EPYC VM about 1.3 µs
/// a matmul in a decode step, with the step's small data out of cache behind the
/// streamed weights (`SLUICE_BENCH_STAGES=1` of `benches/forward.rs`).
pub(crate) fn plan_kept(groups: &[usize], work: usize, n: usize, threads: usize) -> Rc<Plan> {
    let halving = HALVING.load(Ordering::Relaxed);
    PLANS.with_borrow_mut(|kept| {
        let same = |(k, _): &&(Key, Rc<Plan>)| {
            k.0 == groups && (k.1, k.2, k.3, k.4) == (work, n, threads, halving)
        };
        if let Some((_, p)) = kept.iter().find(same) {
            return p.clone();
        }
        let p = Rc::new(plan(groups, work, n, threads));
        if kept.len() == KEPT {
            kept.remove(0);
        }
        kept.push(((groups.to_vec(), work, n, threads, halving), p.clone()));
        p
    })
}

/// The plan for matrices of `groups[k]` weight groups and `work` multiply-adds in all,
/// against `n` activation rows, on `threads` compute threads.
pub(crate) fn plan(groups: &[usize], work: usize, n: usize, threads: usize) -> Plan {
    let row_parts = if n >= 2 * SPLIT_ROWS {
        n / SPLIT_ROWS
    } else {
        1
    };
    let group_parts = (threads * 4).max(work / TASK_WORK / row_parts);
    let little = threads > 1 && row_parts == 1 && group_parts == threads * 4;
    if little && HALVING.load(Ordering::Relaxed) {
        return halving(groups, n, threads);
    }
    let total: usize = groups.iter().sum();
    let per_task = total.div_ceil(group_parts).max(1);
    let mut plan = Plan {
        parts: Vec::new(),
        bounds: vec![0],
    };
    for (k, &groups) in groups.iter().enumerate() {
        let parts = groups.div_ceil(per_task);
        for t in 0..parts {
            for r in 0..row_parts {
                let part = Part {
                    groups: t * groups / parts..(t + 1) * groups / parts,
                    // Whole `SPLIT_ROWS`, the last part taking the rest.
                    rows: r * SPLIT_ROWS..if r + 1 == row_parts {
                        n
                    } else {
                        (r + 1) * SPLIT_ROWS
                    },
                };
                plan.parts.push((k, part));
                plan.end_task();
            }
        }
    }
    plan
}

/// Each thread's share of the groups (counted across the matrices in order) cut into
/// halving tasks, the same number for every thread, none empty unless there are fewer
/// groups than threads.
fn halving(groups: &[usize], n: usize, threads: usize) -> Plan {
    let total: usize = groups.iter().sum();
    let smallest = (total / threads).max(1);
    let halvings = smallest.ilog2().min(HALVINGS);
    let mut plan = Plan {
        parts: Vec::new(),
        bounds: vec![0],
    };
    for k in 0..threads {
        let (lo, hi) = (k * total / threads, (k + 1) * total / threads);
        let s = hi - lo;
        let mut from = lo;
        for j in 1..=halvings + 1 {
            let to = if j > halvings {
                hi
            } else {
                hi - s.div_ceil(1 << j)
            };
            push_span(&mut plan, groups, from..to, n);
            plan.end_task();
            from = to;
        }
    }
    plan
}

/// The parts covering region groups `span`, one per matrix it touches.
fn push_span(plan: &mut Plan, groups: &[usize], span: Range<usize>, n: usize) {
    let mut first = 0;
    for (k, &g) in groups.iter().enumerate() {
        let (lo, hi) = (span.start.max(first), span.end.min(first + g));
        if lo < hi {
            plan.parts.push((
                k,
                Part {
                    groups: lo - first..hi - first,
                    rows: 0..n,
                },
            ));
        }
        first += g;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (matrix, group, activation row) is in exactly one task.
    fn covers_once(p: &Plan, groups: &[usize], n: usize) {
        let mut seen: Vec<Vec<u32>> = groups.iter().map(|&g| vec![0; g * n]).collect();
        for t in 0..p.len() {
            for (k, part) in p.task(t) {
                for g in part.groups.clone() {
                    for r in part.rows.clone() {
                        seen[*k][g * n + r] += 1;
                    }
                }
            }
        }
        assert!(seen.iter().flatten().all(|&c| c == 1), "{groups:?} n={n}");
    }

    #[test]
    fn every_group_and_row_is_in_exactly_one_task() {
        for groups in [
            &[36, 12, 12][..],
            &[36],
            &[96, 96],
            &[3072],
            &[1],
            &[2, 1],
            &[0, 5],
        ] {
            for n in [1, 3, 8, 32, 95, 96, 150] {
                for threads in [1, 2, 3, 4] {
                    let work = groups.iter().sum::<usize>() * 16 * 576 * n;
                    covers_once(&plan(groups, work, n, threads), groups, n);
                }
            }
        }
    }

    /// SmolLM2's decode q/k/v (60 groups) on 2 threads: each share halves 15, 7, 4, 2, 2,
    /// one task spanning q's end and k's start; thread 1's share starts at group 30.
    #[test]
    fn a_decode_share_is_cut_into_halving_tasks() {
        let groups = [36, 12, 12];
        let p = plan(&groups, 960 * 576, 1, 2);
        let sizes: Vec<usize> = (0..p.len())
            .map(|t| p.task(t).iter().map(|(_, part)| part.groups.len()).sum())
            .collect();
        assert_eq!(sizes, [15, 7, 4, 2, 2, 15, 7, 4, 2, 2]);
        assert_eq!(p.task(5)[0].1.groups.start, 30);
        assert_eq!(p.task(5).len(), 2, "{:?}", p.task(5));
        covers_once(&p, &groups, 1);
    }

    /// A kept plan is the plan the same arguments make, and a change of any argument (the
    /// halving knob included) makes a new one.
    #[test]
    fn a_kept_plan_is_the_plan_made_fresh() {
        let tasks = |p: &Plan| -> Vec<Vec<(usize, Part)>> {
            (0..p.len()).map(|t| p.task(t).to_vec()).collect()
        };
        let args: [(&[usize], usize, usize); 4] = [
            (&[36, 12, 12], 960 * 576, 1),
            (&[36], 576 * 576, 1),
            (&[96, 96], 2 * 1536 * 576, 4),
            (&[36, 12, 12], 960 * 576 * 200, 200),
        ];
        for _ in 0..2 {
            for &(groups, work, n) in &args {
                for threads in [1, 2, 3] {
                    let kept = plan_kept(groups, work, n, threads);
                    assert_eq!(tasks(&kept), tasks(&plan(groups, work, n, threads)));
                }
            }
        }
        // Kept: the same `Rc` comes back.
        let (a, b) = (plan_kept(&[36], 1, 1, 2), plan_kept(&[36], 1, 1, 2));
        assert!(Rc::ptr_eq(&a, &b));
        // More argument sets than are kept: still each one's own plan.
        for g in 1..=2 * KEPT {
            assert_eq!(plan_kept(&[g], g, 1, 2).len(), plan(&[g], g, 1, 2).len());
        }
    }

    /// An output head (much work) keeps equal tasks of bounded work.
    #[test]
    fn much_work_is_cut_into_equal_bounded_tasks() {
        let p = plan(&[3072], 49152 * 576, 1, 2);
        assert_eq!(p.len(), 27);
        assert!((0..p.len()).all(|t| p.task(t).len() == 1));
    }
}
