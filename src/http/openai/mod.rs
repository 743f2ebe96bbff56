//! OpenAI-compatible endpoints.

pub mod chat;
pub mod completions;
pub mod models;
mod run;
pub mod tokenize;
