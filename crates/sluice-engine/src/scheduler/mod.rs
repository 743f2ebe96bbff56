//! Scheduling policy: prompt-length buckets and prefill batch formation. Pure functions
//! over plain data; the engine worker applies them.

pub mod batcher;
pub mod bucket;

pub use batcher::{Plan, Waiting, plan};
pub use bucket::Buckets;
