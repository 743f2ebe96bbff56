//! Scheduling policy: prompt-length buckets, prefill batch formation and prompt chunk
//! sizes. Pure functions over plain data; the engine worker applies them.

pub mod batcher;
pub mod bucket;
pub mod chunk;

pub use batcher::{Waiting, plan};
pub use bucket::Buckets;
pub use chunk::{chunk_cost, chunk_rows};
