//! Tests of long rows cut into parts (`ATTN_PART`): every level's kernels merged against the
//! f64 definition and against each part run alone, the parts run apart and merged against
//! the row whole, and a row of one part against the kernel's output.

use super::*;

/// A row's contiguous queries, keys (scores large enough that one part's maximum is far
/// from another's) and values, from seed `seed`.
struct Row {
    q: Vec<f32>,
    keys: Vec<f16>,
    values: Vec<f16>,
    table: Vec<u32>,
}

impl Row {
    fn new((hd, g, len): (usize, usize, usize), seed: u32) -> Self {
        let stride = len.next_multiple_of(16);
        Row {
            q: noise(g * hd, seed),
            keys: halves(
                noise(hd * stride, seed + 1)
                    .iter()
                    .map(|x| x * 8.0)
                    .collect(),
            ),
            values: halves(noise(stride * hd, seed + 2)),
            table: identity(stride),
        }
    }

    /// Its attention over `start..len`, head size `hd`, scale 0.125.
    fn attn(&self, hd: usize, start: usize, len: usize) -> Attn<'_> {
        Attn {
            q: &self.q,
            hd,
            keys: &self.keys,
            values: &self.values,
            table: &self.table,
            block_stride: hd * KEY_BLOCK,
            len,
            scale: 0.125,
            start,
            softcap: None,
        }
    }
}

/// The row at `level` (that level's kernel, which cuts it into its parts), merged; and
/// each part by that kernel alone, merged, which must give the same bits.
fn cut_at(level: Simd, a: &Attn, out: &mut [f32]) {
    let (g, hd, parts) = (a.q.len() / a.hd, a.hd, a.parts());
    let run = |a: &Attn, o: &mut [f32], stats: &mut [PartStat]| kernel_at(level, a, o, stats);
    let mut outs = vec![f32::NAN; parts.len() * g * hd];
    let mut stats = vec![PartStat::default(); parts.len() * g];
    run(a, &mut outs, &mut stats);
    merge_parts(parts.len(), &stats, &outs, out);
    let mut apart = vec![f32::NAN; parts.len() * g * hd];
    let mut apart_stats = vec![PartStat::default(); parts.len() * g];
    for (i, c) in parts.clone().enumerate() {
        let part = a.part(c).expect("a part");
        let o = &mut apart[i * g * hd..][..g * hd];
        run(&part, o, &mut apart_stats[i * g..][..g]);
    }
    assert!(
        same_bits(&outs, &apart) && stats == apart_stats,
        "{level:?}: parts apart"
    );
}

/// Rows of 1,000 to 3,000 positions, from 0 or from a window's start, scores large enough
/// that one part's maximum is far from another's.
fn long_rows() -> Vec<(usize, usize, usize, usize)> {
    // (hd, g, start, len)
    vec![
        (64, 3, 0, 2 * ATTN_PART + 600),
        (64, 1, 0, ATTN_PART + 1),
        (32, 2, ATTN_PART - 100, 2 * ATTN_PART + 5),
        (48, 2, 37, ATTN_PART + 300),
        (64, 4, 0, ATTN_PART),
    ]
}

crate::level_tests!(a_long_row_cut_into_parts_matches_the_definition);

fn a_long_row_cut_into_parts_matches_the_definition(level: Simd) {
    for (hd, g, start, len) in long_rows() {
        let row = Row::new((hd, g, len), 41);
        let a = row.attn(hd, start, len);
        assert_eq!(a.parts().len(), len.div_ceil(ATTN_PART) - start / ATTN_PART);
        let want = definition(&row.q, (&row.keys, &row.values), hd, (start, len), 0.125);
        let mut got = vec![f32::NAN; g * hd];
        cut_at(level, &a, &mut got);
        for (x, y) in got.iter().zip(&want) {
            assert!(
                (*x as f64 - y).abs() < 1e-5,
                "{level:?} hd={hd} g={g} {start}..{len}: {x} vs {y}"
            );
        }
        // `attend_group` is the current level's cut, bit for bit.
        if level == Simd::current() {
            let mut whole = vec![f32::NAN; g * hd];
            attend_group(&a, &mut Vec::new(), &mut whole);
            assert!(same_bits(&whole, &got), "{level:?} {start}..{len}");
        }
    }
}

/// The parts of a row run apart (in runs of one or two, in any order, each with its own
/// scratch, as threads run them) and merged give exactly what `attend_group` gives the
/// row; a row of one part gets exactly the kernel's output.
#[test]
fn parts_run_apart_and_merged_give_the_row_its_bits() {
    for (hd, g, start, len) in long_rows() {
        let row = Row::new((hd, g, len), 51);
        let a = row.attn(hd, start, len);
        let mut whole = vec![f32::NAN; g * hd];
        attend_group(&a, &mut Vec::new(), &mut whole);
        let parts = a.parts();
        let mut outs = vec![f32::NAN; parts.len() * g * hd];
        let mut stats = vec![PartStat::default(); parts.len() * g];
        // In runs of one or two parts, the later ones first.
        let starts: Vec<usize> = parts.clone().step_by(2).collect();
        for &c in starts.iter().rev() {
            let run = c..(c + 2).min(parts.end);
            let i = c - parts.start;
            let o = &mut outs[i * g * hd..][..run.len() * g * hd];
            let st = &mut stats[i * g..][..run.len() * g];
            attend_parts(&a, run, &mut vec![7.0; 3], o, st);
        }
        let mut merged = vec![f32::NAN; g * hd];
        merge_parts(parts.len(), &stats, &outs, &mut merged);
        assert!(same_bits(&whole, &merged), "{start}..{len}");
        // A row of one part: the kernel's output as it is.
        if parts.len() == 1 {
            let mut kernel = vec![f32::NAN; g * hd];
            group_at(Simd::current(), &a, &mut kernel);
            assert!(same_bits(&whole, &kernel), "one part: {start}..{len}");
        }
    }
}
