//! Weight swaps at a step boundary: the engine keeps its KV slab, slots, queue and
//! thread; only the model value changes (docs/ARCHITECTURE.md, "Weight reload").

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::model::Model;

/// What happens to sequences in flight when new weights arrive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReloadMode {
    /// Stop admitting prefills, let running sequences finish on the old weights, swap,
    /// resume. No response mixes weights.
    #[default]
    Wait,
    /// Swap at the next step; running sequences continue on the new weights.
    Keep,
    /// End running sequences with an error, then swap.
    Abort,
}

/// A swap request for the engine thread.
pub(crate) struct Swap {
    pub model: Box<dyn Model>,
    pub version: String,
    pub mode: ReloadMode,
    pub reply: oneshot::Sender<Swapped>,
    pub requested: Instant,
}

/// The engine's report of a swap.
pub struct Swapped {
    /// The model that was replaced, to be dropped off the engine thread.
    pub old: Box<dyn Model>,
    /// Time the engine spent between two steps doing the swap.
    pub pause: Duration,
    /// Time from the request reaching the engine to the swap (waiting for in-flight
    /// sequences in `wait` mode).
    pub waited: Duration,
    /// Sequences ended by `abort`.
    pub aborted: usize,
}
