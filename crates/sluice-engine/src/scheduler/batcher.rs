//! Prefill batch formation: a pure function of the queue, the free slots and a token
//! budget (docs/ARCHITECTURE.md, "Buckets and batches" and "The engine loop").

use super::bucket::Buckets;

/// What the batcher needs to know about a queued request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// Prompt tokens.
    pub prompt_len: usize,
}

/// A prefill batch: indices into the queue (oldest first) and their shared bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Queue positions to prefill together.
    pub picks: Vec<usize>,
    /// Bucket length of the batch.
    pub bucket: usize,
}

impl Plan {
    /// Tokens of padding the batch's shape carries (bucket x rows minus real tokens).
    #[cfg(test)]
    pub fn padding(&self, queue: &[Waiting]) -> usize {
        self.picks
            .iter()
            .map(|&i| self.bucket - queue[i].prompt_len.min(self.bucket))
            .sum()
    }
}

/// Picks the next prefill batch. The oldest request always goes first (no starvation) and
/// fixes the bucket; later requests of the same bucket join in queue order while there
/// are free slots and the padded shape stays within `max_tokens` (the oldest request is
/// taken even when its bucket alone exceeds the budget).
pub fn plan(
    queue: &[Waiting],
    free_slots: usize,
    max_tokens: usize,
    buckets: Buckets,
) -> Option<Plan> {
    let first = queue.first()?;
    if free_slots == 0 {
        return None;
    }
    let bucket = buckets.of(first.prompt_len);
    let mut picks = vec![0];
    for (i, w) in queue.iter().enumerate().skip(1) {
        if picks.len() == free_slots || (picks.len() + 1) * bucket > max_tokens {
            break;
        }
        if buckets.of(w.prompt_len) == bucket {
            picks.push(i);
        }
    }
    Some(Plan { picks, bucket })
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Buckets = Buckets { min: 16, max: 2048 };

    fn queue(lens: &[usize]) -> Vec<Waiting> {
        lens.iter()
            .map(|&prompt_len| Waiting { prompt_len })
            .collect()
    }

    #[test]
    fn groups_the_oldest_requests_bucket() {
        let q = queue(&[20, 5, 30, 100, 17]);
        let p = plan(&q, 8, 4096, B).unwrap();
        assert_eq!(
            p,
            Plan {
                picks: vec![0, 2, 4],
                bucket: 32
            }
        );
        assert_eq!(p.padding(&q), 12 + 2 + 15);
    }

    #[test]
    fn respects_free_slots_and_token_budget() {
        let q = queue(&[10, 11, 12, 13]);
        assert_eq!(plan(&q, 2, 4096, B).unwrap().picks, vec![0, 1]);
        assert_eq!(plan(&q, 8, 48, B).unwrap().picks, vec![0, 1, 2]);
        assert_eq!(plan(&q, 0, 4096, B), None);
        assert_eq!(plan(&[], 4, 4096, B), None);
    }

    #[test]
    fn oldest_is_taken_even_over_budget() {
        let q = queue(&[1500, 1400]);
        assert_eq!(
            plan(&q, 4, 512, B).unwrap(),
            Plan {
                picks: vec![0],
                bucket: 2048
            }
        );
    }
}
