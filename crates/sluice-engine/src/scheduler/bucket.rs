//! Power-of-two prompt-length buckets (docs/ARCHITECTURE.md, "Buckets and batches").

/// Bucketing limits, from the engine configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// Smallest bucket (prompts shorter than this share it).
    pub min: usize,
    /// Largest bucket: the context length.
    pub max: usize,
}

impl Buckets {
    /// The bucket of an `n`-token prompt: `max(min, next_power_of_two(n))`, capped at `max`
    /// so that rounding never asks for more room than the context has: the exact length
    /// is used when the power of two would not fit (docs/ARCHITECTURE.md, "Buckets and
    /// batches").
    pub fn of(&self, n: usize) -> usize {
        let b = n.max(1).next_power_of_two().max(self.min);
        if b > self.max { n.max(1) } else { b }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_powers_of_two_from_the_minimum() {
        let b = Buckets { min: 16, max: 2048 };
        assert_eq!(b.of(1), 16);
        assert_eq!(b.of(16), 16);
        assert_eq!(b.of(17), 32);
        assert_eq!(b.of(600), 1024);
        assert_eq!(b.of(2048), 2048);
    }

    #[test]
    fn never_rounds_past_the_context() {
        // 600 tokens in a 1000-token context: the 1024 bucket would not fit, so the
        // prompt runs at its exact length instead of being refused (the Tunix bug).
        let b = Buckets { min: 16, max: 1000 };
        assert_eq!(b.of(600), 600);
        assert_eq!(b.of(500), 512);
    }
}
