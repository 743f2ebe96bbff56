//! sluice: an OpenAI-compatible LLM inference server with a static-shape engine.
//!
//! This crate is the server: HTTP routes and SSE (`http`), wire types (`api`), the one
//! way from a wire request to an engine request (`validation`), configuration parsed
//! once (`config`), the error table (`error`) and the entry point [`run`]. The engine
//! (`sluice-engine`) and the kernels (`sluice-kernels`) are crates of their own;
//! docs/ARCHITECTURE.md maps the whole.

#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod error;
pub mod http;
pub mod metrics;
pub mod reasoning;
mod server;
pub mod tools;
pub mod validation;

pub use http::models::load_model;
pub use server::{run, run_with};
/// The engine crate, re-exported.
pub use sluice_engine as engine;
/// The tokenizer, re-exported from the engine.
pub use sluice_engine::tokenizer;
