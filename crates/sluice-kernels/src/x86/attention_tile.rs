//! What the tile kernels of `attention::attend_rows` (`avx2::rows`, `avx512::rows`) share
//! beside their vector code: the tile's shape and block table, checked; its queries scaled
//! and laid out for broadcasting; each query's soft-cap and softmax over its own positions;
//! the positions each query takes. Plain code, inlined into each kernel (and so compiled
//! with its features).

use crate::layout::{Attn, PartStat};
use crate::plain::softmax_unnormalised;

/// A tile of consecutive rows of one slot, `g` heads each: query `j` is row `j / g`, head
/// `j % g`.
pub(crate) struct Tile<'t, 'a> {
    pub tile: &'t [Attn<'a>],
    pub hd: usize,
    pub g: usize,
    /// Queries: rows x heads.
    pub nq: usize,
    /// Each row's end (its live length).
    pub ends: Vec<usize>,
    pub min_start: usize,
    pub max_start: usize,
    pub min_end: usize,
    pub max_end: usize,
}

impl<'t, 'a> Tile<'t, 'a> {
    /// The shape of `tile`, checked: every row has the same keys, values, block table,
    /// block stride, head size, scale and soft-cap, a head size that is a multiple of
    /// `align`, at most `queries` queries in all, and `out_len` outputs; and the blocks of
    /// the tile's positions are inside the pools (`Attn::check_blocks`), so the kernels
    /// may read any of them whole.
    #[inline(always)]
    pub fn new(tile: &'t [Attn<'a>], queries: usize, align: usize, out_len: usize) -> Self {
        let a0 = &tile[0];
        let hd = a0.hd;
        let g = a0.q.len() / hd;
        let nq = tile.len() * g;
        let ends: Vec<usize> = tile.iter().map(|a| a.len).collect();
        let t = Self {
            tile,
            hd,
            g,
            nq,
            min_start: tile.iter().map(|a| a.start).min().expect("a row"),
            max_start: tile.iter().map(|a| a.start).max().expect("a row"),
            min_end: *ends.iter().min().expect("a row"),
            max_end: *ends.iter().max().expect("a row"),
            ends,
        };
        assert!(
            hd.is_multiple_of(align)
                && nq <= queries
                && out_len == nq * hd
                && tile.iter().all(|a| {
                    a.hd == hd
                        && a.q.len() == g * hd
                        && a.start < a.len
                        && std::ptr::eq(a.keys, a0.keys)
                        && std::ptr::eq(a.values, a0.values)
                        && std::ptr::eq(a.table, a0.table)
                        && a.block_stride == a0.block_stride
                        && a.scale == a0.scale
                        && a.softcap == a0.softcap
                }),
            "attention tile shapes"
        );
        // The row that reaches furthest: its blocks, from the tile's first position, are
        // the tile's (the rows share the table).
        let last = t.ends.iter().position(|&e| e == t.max_end);
        tile[last.expect("a row")].check_blocks(t.min_start, t.max_end);
        t
    }

    /// The scaled queries, query `j`'s dimension `d` at `[d * queries + j]` (zero past
    /// `nq`): one broadcast load per query and dimension.
    #[inline(always)]
    pub fn scaled_queries(&self, queries: usize) -> Vec<f32> {
        let mut qs = vec![0f32; self.hd * queries];
        // Written in order, read across: the other way round LLVM made the loop
        // scatter stores, 7% of a prompt's attention.
        for (d, qs) in qs.chunks_exact_mut(queries).enumerate() {
            for (r, a) in self.tile.iter().enumerate() {
                for h in 0..self.g {
                    qs[r * self.g + h] = a.q[h * self.hd + d] * a.scale;
                }
            }
        }
        qs
    }

    /// Soft-caps and exponentiates each query's own positions in `scores` (query `j`'s
    /// scores at `[j * lp..]`, from position `p0`), as `attend_group` does for its row;
    /// returns each query's 1 / sum, and puts its max and sum in `stats` (`nq` of them).
    #[inline(always)]
    pub fn softmax<const Q: usize>(
        &self,
        scores: &mut [f32],
        lp: usize,
        p0: usize,
        stats: &mut [PartStat],
    ) -> [f32; Q] {
        assert!(stats.len() >= self.nq, "attention tile shapes");
        let mut inv = [0f32; Q];
        for (j, inv) in inv.iter_mut().enumerate().take(self.nq) {
            let (start, end) = self.range(j);
            let s = &mut scores[j * lp + start - p0..j * lp + end - p0];
            if let Some(cap) = self.tile[0].softcap {
                for x in s.iter_mut() {
                    *x = cap * (*x / cap).tanh();
                }
            }
            stats[j] = softmax_unnormalised(s);
            *inv = 1.0 / stats[j].sum;
        }
        inv
    }

    /// Positions `start..end` query `j` takes.
    pub fn range(&self, j: usize) -> (usize, usize) {
        (self.tile[j / self.g].start, self.ends[j / self.g])
    }

    /// Each query's positions, `(0, 0)` past `nq`.
    pub fn ranges<const Q: usize>(&self) -> [(usize, usize); Q] {
        std::array::from_fn(|j| if j < self.nq { self.range(j) } else { (0, 0) })
    }

    /// Positions every query of the tile takes: `max_start..min_end` (empty if none).
    pub fn common(&self) -> (usize, usize) {
        (self.max_start, self.min_end.max(self.max_start))
    }
}
