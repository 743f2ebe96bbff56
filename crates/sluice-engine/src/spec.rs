//! Drafts for speculative decoding, taken from the sequence itself (prompt lookup): the
//! latest earlier occurrence of its last few tokens, and the tokens that followed it
//! (docs/ARCHITECTURE.md, "Speculative decoding"). A draft is only a guess: the step
//! verifies every drafted token against the model's own choice, so a wrong draft costs a
//! few rows of compute and never changes a token.

use std::collections::HashMap;

/// The longest and shortest suffix looked up, longest first: a match of four tokens
/// predicts what follows far better than a match of one.
const MAX_N: usize = 4;
const MIN_N: usize = 2;

/// The first draft's length at most, and the length of a draft found by a two-token match
/// at most: verifying drafted rows is not free (each wants the output head's logits; one
/// stream verifying 4 drafts costs about 2x a plain step, 8 drafts 2.5x, `benches/forward`),
/// so a sequence earns longer drafts by having them accepted.
const FIRST: usize = 4;
const SHORT_MATCH: usize = 2;

/// Steps a sequence skips drafting after `n` drafts in a row were wholly rejected: none
/// after one, then 1, 3, 7, ... up to 31. Text that does not repeat itself stops paying
/// for drafts within a few steps; a sequence that starts copying again is drafting
/// again within 32 steps.
fn backoff(n: u32) -> u32 {
    (1u32 << n.min(5)) - 1
}

/// One sequence's n-gram index and its record of how its drafts fared.
#[derive(Debug, Default)]
pub(crate) struct Drafter {
    /// (n, hash of n tokens) -> the latest position at which those n tokens end.
    index: HashMap<u64, u32>,
    /// Positions `0..indexed` are indexed as n-gram ends.
    indexed: usize,
    /// Drafts in a row that were wholly rejected.
    misses: u32,
    /// The longest draft it proposes next (0: not yet set, `FIRST`): doubled when a whole
    /// draft is accepted, cut to one more than what was accepted when one is not.
    limit: usize,
    /// Steps left to sit out.
    resting: u32,
}

fn key(tokens: &[u32]) -> u64 {
    // FNV-1a over the ids and the length: a collision only makes a useless draft.
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ tokens.len() as u64;
    for &t in tokens {
        h = (h ^ u64::from(t)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Drafter {
    /// Up to `most` tokens that may follow `len` tokens (`token(i)` is the i-th), or none:
    /// the continuation of the latest earlier occurrence of the longest suffix (of
    /// `MAX_N` down to `MIN_N` tokens) seen before. Indexes the positions added since the
    /// last call, so each step costs a few hash operations per new token.
    pub fn propose(&mut self, len: usize, token: impl Fn(usize) -> u32, most: usize) -> Vec<u32> {
        let most = self.budget(most);
        if most == 0 || len < MIN_N + 1 {
            return Vec::new();
        }
        // Every end position but the last: the last suffix must find an earlier one.
        let mut window = Vec::with_capacity(MAX_N);
        for end in self.indexed..len - 1 {
            for n in MIN_N..=MAX_N.min(end + 1) {
                window.clear();
                window.extend((end + 1 - n..=end).map(&token));
                self.index.insert(key(&window), end as u32);
            }
        }
        self.indexed = self.indexed.max(len - 1);
        for n in (MIN_N..=MAX_N.min(len)).rev() {
            window.clear();
            window.extend((len - n..len).map(&token));
            if let Some(&end) = self.index.get(&key(&window)) {
                let most = if n == MIN_N {
                    most.min(SHORT_MATCH)
                } else {
                    most
                };
                let from = end as usize + 1;
                let to = (from + most).min(len);
                return (from..to).map(&token).collect();
            }
        }
        Vec::new()
    }

    /// How many tokens it may draft this step, at most `most`: 0 while it rests after
    /// failed drafts (counting the step), else its current limit.
    pub fn budget(&mut self, most: usize) -> usize {
        if self.resting > 0 {
            self.resting -= 1;
            return 0;
        }
        if self.limit == 0 {
            self.limit = FIRST;
        }
        most.min(self.limit)
    }

    /// Records how a draft of `drafted` tokens fared: `accepted` of them were the model's
    /// own choices. `most` is the longest draft allowed (`--spec-tokens`).
    pub fn record(&mut self, drafted: usize, accepted: usize, most: usize) {
        if drafted == 0 {
            return;
        }
        self.limit = if accepted == drafted {
            (2 * drafted).max(self.limit).min(most.max(1))
        } else {
            accepted + 1
        };
        if accepted == 0 {
            self.misses += 1;
            self.resting = backoff(self.misses - 1);
        } else {
            self.misses = 0;
        }
    }

    /// Forgets what it indexed (the tokens changed under it, as after a rewind).
    #[cfg(test)]
    fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn propose(d: &mut Drafter, toks: &[u32], most: usize) -> Vec<u32> {
        d.propose(toks.len(), |i| toks[i], most)
    }

    #[test]
    fn the_latest_occurrence_of_the_longest_suffix_is_continued() {
        let mut d = Drafter::default();
        // "1 2 3 4 9" then "5 2 3 4 8 8", now ending "2 3 4": the later occurrence wins.
        let toks = [1, 2, 3, 4, 9, 5, 2, 3, 4, 8, 8, 7, 2, 3, 4];
        assert_eq!(propose(&mut d, &toks, 3), vec![8, 8, 7]);
        // A longer suffix match beats a later shorter one.
        d.reset();
        let toks = [7, 2, 3, 4, 1, 1, 9, 3, 4, 5, 5, 7, 2, 3, 4];
        assert_eq!(propose(&mut d, &toks, 2), vec![1, 1]);
    }

    #[test]
    fn drafts_stop_at_the_end_of_what_is_known_and_at_most() {
        let mut d = Drafter::default();
        let toks = [5, 6, 7, 8, 5, 6, 7];
        assert_eq!(propose(&mut d, &toks, 10), vec![8, 5, 6, 7]);
        assert_eq!(propose(&mut d, &toks, 1), vec![8]);
        assert_eq!(propose(&mut d, &toks, 0), Vec::<u32>::new());
        // A two-token match proposes two tokens at most.
        let toks = [5, 6, 7, 8, 9, 1, 5, 6];
        assert_eq!(propose(&mut Drafter::default(), &toks, 10), vec![7, 8]);
    }

    #[test]
    fn drafts_grow_while_accepted_whole_and_shrink_to_what_was_accepted() {
        let toks: Vec<u32> = (0..40).map(|i| i % 20).collect();
        let mut d = Drafter::default();
        assert_eq!(propose(&mut d, &toks, 16).len(), 4);
        d.record(4, 4, 16);
        assert_eq!(propose(&mut d, &toks, 16).len(), 8);
        d.record(8, 8, 16);
        assert_eq!(propose(&mut d, &toks, 16).len(), 16);
        d.record(16, 16, 16);
        assert_eq!(
            propose(&mut d, &toks, 16).len(),
            16,
            "never above --spec-tokens"
        );
        d.record(16, 2, 16);
        assert_eq!(propose(&mut d, &toks, 16).len(), 3);
    }

    #[test]
    fn nothing_repeated_means_no_draft_and_a_single_token_match_is_not_enough() {
        let mut d = Drafter::default();
        assert!(propose(&mut d, &[1, 2, 3, 4, 5, 6], 4).is_empty());
        assert!(propose(&mut d, &[1, 2, 3, 4, 5, 6, 9, 4], 4).is_empty());
    }

    #[test]
    fn indexing_is_incremental_and_sees_new_tokens() {
        let mut d = Drafter::default();
        let mut toks = vec![10, 11, 12, 13];
        assert!(propose(&mut d, &toks, 4).is_empty());
        toks.extend([14, 10, 11, 12]);
        assert_eq!(propose(&mut d, &toks, 4), vec![13, 14, 10, 11]);
        toks.extend([13, 14, 10, 11]);
        // "13 14 10 11" occurred before, ending at 6: what followed it.
        assert_eq!(propose(&mut d, &toks, 2), vec![12, 13]);
    }

    #[test]
    fn wholly_rejected_drafts_make_it_rest_longer_each_time_and_a_hit_resets() {
        let mut d = Drafter::default();
        let toks = [1, 2, 3, 1, 2];
        assert!(!propose(&mut d, &toks, 2).is_empty());
        d.record(2, 0, 2); // rests 0 steps
        assert!(!propose(&mut d, &toks, 2).is_empty());
        d.record(1, 0, 2); // rests 1
        assert!(propose(&mut d, &toks, 2).is_empty());
        assert!(!propose(&mut d, &toks, 2).is_empty());
        d.record(1, 0, 2); // rests 3
        for _ in 0..3 {
            assert!(propose(&mut d, &toks, 2).is_empty());
        }
        assert!(!propose(&mut d, &toks, 2).is_empty());
        d.record(1, 1, 2);
        d.record(2, 0, 2); // a hit reset the count: rests 0 again
        assert!(!propose(&mut d, &toks, 2).is_empty());
    }
}
