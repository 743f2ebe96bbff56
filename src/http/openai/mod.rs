//! OpenAI-compatible endpoints.

pub mod chat;
pub mod completions;
pub mod models;
pub mod run;
pub mod tokenize;
