//! Scheduling policy: prompt-length buckets, prefill batch formation, prompt chunk sizes
//! and the step plan. Pure functions over plain data; the engine worker applies them.

pub mod batcher;
pub mod bucket;
pub mod chunk;
pub mod step;

pub use batcher::{Waiting, plan};
pub use bucket::Buckets;
pub use step::{Need, plan_step};
