//! For the repository's benches and integration tests only, not a stable API: the parts
//! below the engine handle that they drive directly (a forward pass on a KV slab, the
//! sampler alone, the failpoint trigger).

pub use crate::failpoint::TRIGGER;
pub use crate::kv::{KvSlab, TokenRow};
pub use crate::model::load as load_model;
pub use crate::model::{Model, Shape, set_split_below as set_attention_split_below};
pub use crate::sampling::{History, sample, scores};
