//! The generation engine: model runtime, KV slab, sampler and the scheduling loop on its
//! own thread, reached through an [`EngineHandle`].

pub mod batch;
mod handle;
pub mod kv;
pub mod model;
mod reload;
pub mod request;
pub mod sampling;
mod sequence;
pub mod slots;
mod stops;
mod worker;

pub use handle::{EngineConfig, EngineHandle, EventStream, SubmitError};
pub use reload::{ReloadMode, Swapped};
pub use request::{Event, Finish, FinishReason, TokenEvent, ValidRequest};
