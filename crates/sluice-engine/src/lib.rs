//! sluice's engine: everything between a validated request and its tokens, with no HTTP.
//!
//! What the server sees (re-exported here; every module is private but `checkpoint`,
//! `tokenizer` and `testing`):
//! - Loading: [`load`] opens a GGUF file or a Hugging Face folder and builds its model and
//!   [`Tokenizer`]; [`checkpoint`] says what a reload may swap in; [`warm_up`] runs one token.
//! - Running: [`EngineHandle::start`] spawns the engine thread, which alone owns the model,
//!   the KV cache and the slots; [`EngineHandle::submit`] queues a [`ValidRequest`] and
//!   returns its stream of [`Event`]s.
//! - Errors: [`ModelError`], [`TokenizerError`], [`SubmitError`], [`EngineError`].
//!
//! Inside, one way down: `handle` → `protocol` (the channel's types) ← `worker` →
//! `sequence`, `scheduler` (pure policy), `sampling`, `cache` (→ `blocks`, `kv`), `model` →
//! `kv`; `gguf` and `hf` under
//! `model` and `tokenizer`; `error` and `config` are leaves. docs/ARCHITECTURE.md maps it.

// No `unsafe` but the model file's memory map (`gguf/mod.rs`, allowed there alone): parallel
// tasks get disjoint memory through `sluice_kernels::threads::for_each_item`.
#![deny(unsafe_code)]

mod beam;
mod blocks;
mod cache;
pub mod checkpoint;
mod class_head;
mod config;
mod constraint;
mod embed;
mod error;
mod failpoint;
mod gguf;
mod handle;
mod hf;
mod kv;
mod load;
mod metrics;
mod model;
mod protocol;
mod reload;
mod request;
mod sampling;
mod scheduler;
mod sequence;
mod slots;
mod spec;
mod stops;
pub mod testing;
mod thinking;
pub mod tokenizer;
mod turns;
mod worker;

pub use class_head::{ClassHead, PairFormat};
pub use config::EngineConfig;
pub use constraint::{Constraint, GrammarSpec, Grammars, json_layout};
pub use embed::Pooling;
pub use error::{EngineError, ModelError, SubmitError, TokenizerError};
pub use failpoint::check as check_failpoint;
pub use gguf::GgufFile;
pub use handle::{EngineHandle, EventStream};
pub use hf::Quantize;
pub use load::{LoadOptions, Loaded, build, load, open_model, warm_up};
pub use metrics::{LATENCY, Metrics, render as render_metrics};
pub use model::{Model, Shape};
pub use reload::{ReloadMode, Swapped};
pub use request::{
    BeamOut, BeamSpec, Event, Finish, FinishReason, PromptToken, TokenEvent, ValidRequest,
};
pub use sampling::SamplingParams;
pub use sluice_kernels::return_freed_memory;
pub use thinking::ThinkSpec;
pub use tokenizer::{ChatMessage, Tokenizer};
