//! Tests of keys and values read through a block table: a shuffled table in a pool of
//! interleaved heads gives the contiguous layout's bits, for a group and for a tile, and a
//! block outside the pools is refused on every path.

use super::*;

/// One sequence's keys and values twice: contiguous (identity table, `block_stride =
/// hd * 16`), and paged: the same blocks in a pool of `HEADS` interleaved KV heads (this
/// one is head 1), in shuffled pool blocks, with a block stride that is more than a block.
/// Everything else in the pool (free blocks, the other heads' parts of each block) is
/// NaN, infinities or huge values, and so are the table's entries of blocks before
/// `first` (not attended) and past the sequence, which the kernels must not read.
struct Paged {
    keys: Vec<f16>,
    values: Vec<f16>,
    identity: Vec<u32>,
    pool_keys: Vec<f16>,
    pool_values: Vec<f16>,
    table: Vec<u32>,
    block_stride: usize,
    hd: usize,
}

const HEADS: usize = 3;

impl Paged {
    /// Positions `0..len` (the rest of the last block NaN in both layouts), attended
    /// from `first` on; `pad` extra elements per pool block, `seed` shuffles the blocks.
    fn new(hd: usize, len: usize, first: usize, pad: usize, seed: u64) -> Self {
        let blocks = len.div_ceil(KEY_BLOCK);
        let size = hd * KEY_BLOCK;
        let mut keys = halves(noise(blocks * size, 41).iter().map(|x| x * 3.0).collect());
        let mut values = halves(noise(blocks * size, 42));
        for p in len..blocks * KEY_BLOCK {
            for d in 0..hd {
                keys[key_index(hd, d, p)] = f16::NAN;
                values[p * hd + d] = f16::NAN;
            }
        }
        // Pool blocks in a shuffled order (a seeded Fisher-Yates), five of them free.
        let pool = blocks + 5;
        let mut order: Vec<u32> = (0..pool as u32).collect();
        let mut x = seed.wrapping_mul(6_364_136_223_846_793_005) | 1;
        for i in (1..pool).rev() {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            order.swap(i, (x >> 33) as usize % (i + 1));
        }
        let mut table = order[..blocks].to_vec();
        for t in &mut table[..first / KEY_BLOCK] {
            *t = u32::MAX;
        }
        table.extend([u32::MAX, 7_000_000]);
        let block_stride = HEADS * size + pad;
        let garbage = [
            f16::NAN,
            f16::INFINITY,
            f16::MAX,
            f16::NEG_INFINITY,
            f16::MIN,
        ];
        let junk = |i: usize| garbage[i % garbage.len()];
        let mut pool_keys: Vec<f16> = (0..pool * block_stride).map(junk).collect();
        let mut pool_values: Vec<f16> = (0..pool * block_stride).map(|i| junk(i + 2)).collect();
        for (b, &t) in order[..blocks].iter().enumerate() {
            let at = t as usize * block_stride + size;
            pool_keys[at..at + size].copy_from_slice(&keys[b * size..(b + 1) * size]);
            pool_values[at..at + size].copy_from_slice(&values[b * size..(b + 1) * size]);
        }
        Self {
            keys,
            values,
            identity: identity(len),
            pool_keys,
            pool_values,
            table,
            block_stride,
            hd,
        }
    }

    /// The `Attn` of `q` over positions `start..len`, contiguous or paged.
    fn attn<'a>(&'a self, paged: bool, q: &'a [f32], len: usize, start: usize) -> Attn<'a> {
        let head = self.hd * KEY_BLOCK;
        let (keys, values, table, block_stride) = if paged {
            let (k, v) = (&self.pool_keys[head..], &self.pool_values[head..]);
            (k, v, &self.table[..], self.block_stride)
        } else {
            (&self.keys[..], &self.values[..], &self.identity[..], head)
        };
        Attn {
            q,
            hd: self.hd,
            keys,
            values,
            table,
            block_stride,
            len,
            scale: 0.125,
            start,
            softcap: None,
        }
    }
}

crate::level_tests!(paged_table_equals_contiguous_for_a_group);

/// `attend_group` through a shuffled table in a pool of interleaved heads gives exactly
/// the bits of the contiguous layout, whatever lies elsewhere in the pool or past `len`.
fn paged_table_equals_contiguous_for_a_group(level: Simd) {
    for (k, (hd, g, len, start, softcap, pad)) in [
        (64usize, 3usize, 37usize, 0usize, None, 0usize),
        (64, 5, 16, 0, None, 24),
        (128, 1, 3, 0, None, 0),
        (48, 2, 20, 0, None, 8),
        (32, 2, 21, 9, Some(3.0f32), 0),
        (64, 4, 700, 188, None, 16),
        (40, 2, 19, 0, Some(5.0), 4),
        (20, 2, 33, 5, None, 0),
        (64, 1, 1, 0, None, 0),
        (256, 4, 300, 44, Some(30.0), 16),
        (64, 3, 1000, 0, None, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let layouts = Paged::new(hd, len, start, pad, k as u64);
        let q = noise(g * hd, 43);
        let [want, got] = [false, true].map(|paged| {
            let mut a = layouts.attn(paged, &q, len, start);
            a.softcap = softcap;
            let mut out = vec![f32::NAN; g * hd];
            group_at(level, &a, &mut out);
            out
        });
        assert!(
            want.iter().all(|x| x.is_finite()),
            "{level:?} hd={hd} len={len}"
        );
        assert!(
            same_bits(&got, &want),
            "{level:?} hd={hd} g={g} len={len} start={start}"
        );
    }
}

crate::level_tests!(paged_table_equals_contiguous_for_a_tile);

/// `attend_rows` through a shuffled table gives each row exactly the bits of the
/// contiguous layout, and of the row alone through the table, for every tile size.
fn paged_table_equals_contiguous_for_a_tile(level: Simd) {
    for (k, (hd, g, first_end, window, softcap, pad)) in [
        (64usize, 3usize, 37usize, None, None, 0usize),
        (64, 3, 5, None, None, 24),
        (32, 1, 100, None, Some(3.0f32), 0),
        (64, 4, 700, Some(512usize), None, 16),
        (32, 2, 30, Some(7), Some(5.0), 8),
        (40, 2, 19, None, None, 0),
        (48, 3, 40, Some(20), None, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let rows = tile_rows(level, g);
        let len = first_end + rows - 1;
        let start = |end: usize| window.map_or(0, |w: usize| end.saturating_sub(w));
        let layouts = Paged::new(hd, len, start(first_end), pad, 10 + k as u64);
        let q = noise(rows * g * hd, 44);
        let tile = |paged: bool| -> Vec<Attn> {
            (0..rows)
                .map(|r| {
                    let (q, end) = (&q[r * g * hd..(r + 1) * g * hd], first_end + r);
                    let mut a = layouts.attn(paged, q, end, start(end));
                    a.softcap = softcap;
                    a
                })
                .collect()
        };
        let (contiguous, paged) = (tile(false), tile(true));
        for n in 1..=rows {
            let [want, got] = [&contiguous, &paged].map(|tile| {
                let mut out = vec![f32::NAN; n * g * hd];
                rows_at(level, &tile[..n], &mut out);
                out
            });
            let at = format!("{level:?} hd={hd} g={g} end={first_end} window={window:?} n={n}");
            assert!(same_bits(&got, &want), "{at}");
            for (r, a) in paged[..n].iter().enumerate() {
                let mut alone = vec![f32::NAN; g * hd];
                group_at(level, a, &mut alone);
                assert!(
                    same_bits(&got[r * g * hd..][..g * hd], &alone),
                    "{at}: row {r}"
                );
            }
        }
    }
}

crate::level_tests!(a_block_outside_the_pools_is_refused);

/// A table entry or a block stride that would put a block outside the pools, or a table
/// too short for `len`, is refused before anything is read, on every path.
fn a_block_outside_the_pools_is_refused(level: Simd) {
    let (hd, g, len) = (64usize, 2usize, 40usize);
    let layouts = Paged::new(hd, len, 0, 0, 3);
    let q = noise(2 * g * hd, 45);
    let (size, stride) = (hd * KEY_BLOCK, layouts.block_stride);
    // Rows of `len - 1` and `len` positions, through `table`, with pools cut to `cut`.
    let refused = |table: &[u32], block_stride: usize, cut: usize| {
        let tile: Vec<Attn> = (0..2)
            .map(|r| {
                let mut a = layouts.attn(true, &q[r * g * hd..][..g * hd], len - 1 + r, 0);
                (a.table, a.block_stride) = (table, block_stride);
                (a.keys, a.values) = (&a.keys[..cut], &a.values[..cut]);
                a
            })
            .collect();
        let group = std::panic::catch_unwind(|| {
            group_at(level, &tile[1], &mut vec![0.0; g * hd]);
        });
        let rows = std::panic::catch_unwind(|| {
            rows_at(level, &tile, &mut vec![0.0; 2 * g * hd]);
        });
        group.is_err() && rows.is_err()
    };
    let table = &layouts.table[..];
    let blocks = len.div_ceil(KEY_BLOCK);
    let all = layouts.pool_keys.len() - size;
    let last = *table[..blocks].iter().max().expect("a block") as usize;
    // As built: accepted.
    assert!(!refused(table, stride, all));
    let mut outside = table.to_vec();
    outside[1] = (all / stride + 1) as u32;
    assert!(refused(&outside, stride, all));
    assert!(refused(&table[..blocks - 1], stride, all));
    assert!(refused(table, size - 1, all));
    assert!(refused(table, stride, last * stride + size - 1));
}
