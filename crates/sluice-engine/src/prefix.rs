//! Prefix reuse policy: which slot a new request goes to and how much of its prompt is
//! already in the slab (docs/ARCHITECTURE.md, "Prefix reuse"). Pure: the worker keeps one
//! [`SlotCache`] per slot and asks [`place`].

/// What one slot's KV holds: the tokens at positions `0..tokens.len()`, and the engine
/// tick of its last use (for least-recently-used eviction among free slots).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotCache {
    /// Tokens whose keys and values are in the slot, by position.
    pub tokens: Vec<u32>,
    /// When it was last written or leased (0: never).
    pub used_at: u64,
    /// The share key of the request that last held it (its siblings may reuse it).
    pub share: Option<u64>,
}

/// Where a request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The free slot to lease.
    pub slot: usize,
    /// Prompt positions already valid once placed (not computed again).
    pub reuse: usize,
    /// Copy positions `0..reuse` from this slot into `slot` first (a slot in use).
    pub copy_from: Option<usize>,
}

/// Eviction order of free slot `s`: least recently used first, never-used slots before
/// cached ones, lowest number on ties.
pub fn lru_key(caches: &[SlotCache], s: usize) -> (u64, bool, usize) {
    (caches[s].used_at, !caches[s].tokens.is_empty(), s)
}

/// Length of the common prefix of `a` and `b`.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The most of `prompt` that may be reused: all but its last token, whose logits are
/// needed for the first sampled token.
pub fn reusable(prompt: &[u32], cached: &[u32]) -> usize {
    common_prefix(prompt, cached).min(prompt.len().saturating_sub(1))
}

/// Chooses a free slot for `prompt`. Candidates are the free slots' caches (when
/// `reuse_free`, or when last held by a request of the same `share` key) and the slots in
/// `busy` (in use; their prefix is copied). The longest
/// reusable prefix of at least `min_reuse` tokens wins, a free slot over a busy one on
/// equal length (no copy); without one, the least recently used free slot (never-used
/// slots first, lowest number on ties) is taken and nothing is reused. `None`: no free
/// slot.
pub fn place(
    prompt: &[u32],
    caches: &[SlotCache],
    free: &[usize],
    busy: &[usize],
    min_reuse: usize,
    reuse_free: bool,
    share: Option<u64>,
) -> Option<Placement> {
    let lru = *free.iter().min_by_key(|&&s| lru_key(caches, s))?;
    let min = min_reuse.max(1);
    let best_free = free
        .iter()
        .filter(|&&s| reuse_free || (share.is_some() && caches[s].share == share))
        .map(|&s| (reusable(prompt, &caches[s].tokens), s))
        .filter(|&(n, _)| n >= min)
        .max_by_key(|&(n, s)| (n, std::cmp::Reverse(s)));
    let best_busy = busy
        .iter()
        .map(|&s| (reusable(prompt, &caches[s].tokens), s))
        .filter(|&(n, _)| n >= min)
        .max_by_key(|&(n, s)| (n, std::cmp::Reverse(s)));
    Some(match (best_free, best_busy) {
        (Some((n, s)), b) if b.is_none_or(|(m, _)| m <= n) => Placement {
            slot: s,
            reuse: n,
            copy_from: None,
        },
        (_, Some((m, from))) => Placement {
            slot: lru,
            reuse: m,
            copy_from: Some(from),
        },
        _ => Placement {
            slot: lru,
            reuse: 0,
            copy_from: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(tokens: &[u32], used_at: u64) -> SlotCache {
        SlotCache {
            tokens: tokens.to_vec(),
            used_at,
            share: None,
        }
    }

    #[test]
    fn the_longest_cached_prefix_wins_and_the_last_token_is_always_computed() {
        let caches = [cache(&[1, 2], 5), cache(&[1, 2, 3, 4], 1), cache(&[], 0)];
        let p = place(&[1, 2, 3, 4], &caches, &[0, 1, 2], &[], 2, true, None).unwrap();
        assert_eq!(
            p,
            Placement {
                slot: 1,
                reuse: 3,
                copy_from: None
            }
        );
    }

    #[test]
    fn below_the_minimum_the_least_recently_used_free_slot_is_taken() {
        let caches = [cache(&[1, 9], 7), cache(&[5], 3), cache(&[6], 4)];
        let p = place(&[1, 2, 3], &caches, &[0, 1, 2], &[], 2, true, None).unwrap();
        assert_eq!((p.slot, p.reuse, p.copy_from), (1, 0, None));
        // A never-used slot goes before any cached one.
        let caches = [cache(&[1], 2), cache(&[], 0)];
        assert_eq!(
            place(&[3, 4], &caches, &[0, 1], &[], 1, true, None)
                .unwrap()
                .slot,
            1
        );
        assert_eq!(place(&[3], &caches, &[], &[], 1, true, None), None);
    }

    #[test]
    fn a_longer_prefix_in_a_busy_slot_is_copied_into_the_lru_free_slot() {
        let caches = [
            cache(&[1, 2, 3, 4, 5], 9),
            cache(&[1, 2], 2),
            cache(&[7], 1),
        ];
        let p = place(&[1, 2, 3, 4, 8], &caches, &[1, 2], &[0], 2, true, None).unwrap();
        assert_eq!(
            p,
            Placement {
                slot: 2,
                reuse: 4,
                copy_from: Some(0)
            }
        );
        // Equal lengths: the free slot, no copy.
        let p = place(&[1, 2, 9], &caches, &[1, 2], &[0], 2, true, None).unwrap();
        assert_eq!((p.slot, p.reuse, p.copy_from), (1, 2, None));
    }

    #[test]
    fn free_caches_are_ignored_when_reuse_is_off() {
        let caches = [cache(&[1, 2, 3], 9), cache(&[], 0)];
        let p = place(&[1, 2, 3, 4], &caches, &[0, 1], &[], 1, false, None).unwrap();
        assert_eq!((p.slot, p.reuse), (1, 0));
        // ...except for a sibling of the request that left it.
        let mut caches = caches;
        caches[0].share = Some(3);
        let p = place(&[1, 2, 3, 4], &caches, &[0, 1], &[], 1, false, Some(3)).unwrap();
        assert_eq!((p.slot, p.reuse), (0, 3));
    }
}
