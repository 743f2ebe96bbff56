//! OpenAI's stream framing: each chunk an unnamed `data:` event, an optional usage
//! chunk, then `data: [DONE]`; a failure is one error body.

use axum::response::sse::Event as SseEvent;
use sluice_engine::{Finish, PromptToken, TokenEvent};

use crate::api::Usage;
use crate::error::ApiError;
use crate::http::generate::EventMaker;
use crate::tools::stream::Piece;

/// Turns engine events into an endpoint's chunks (JSON strings); the arguments are those
/// of [`EventMaker`]'s methods.
pub(super) trait ChunkMaker: Send + 'static {
    /// Chunks sent before any token (chat's role chunk, echoed prompts).
    fn start(&mut self) -> Vec<String>;
    /// The chunks for the scored prompt of choice `index`, when scores were asked for.
    fn prompt(&mut self, _index: usize, _p: &[PromptToken]) -> Vec<String> {
        Vec::new()
    }
    /// The chunks for a token of choice `index` (often one, possibly none).
    fn token(&mut self, index: usize, t: &TokenEvent, piece: Piece) -> Vec<String>;
    /// The chunks closing choice `index` (the last one carries the finish reason).
    fn done(&mut self, index: usize, f: &Finish, rest: Piece, called: bool) -> Vec<String>;
    /// The usage chunk.
    fn usage(&mut self, u: Usage) -> String;
}

/// A [`ChunkMaker`] in OpenAI's framing.
pub(super) struct Frames<M> {
    maker: M,
    include_usage: bool,
}

impl<M> Frames<M> {
    /// Frames `maker`'s chunks; the usage chunk only when `include_usage`.
    pub(super) fn new(maker: M, include_usage: bool) -> Self {
        Self {
            maker,
            include_usage,
        }
    }
}

fn data(chunks: Vec<String>) -> Vec<SseEvent> {
    chunks
        .into_iter()
        .map(|c| SseEvent::default().data(c))
        .collect()
}

impl<M: ChunkMaker> EventMaker for Frames<M> {
    fn start(&mut self) -> Vec<SseEvent> {
        data(self.maker.start())
    }
    fn prompt(&mut self, index: usize, p: &[PromptToken]) -> Vec<SseEvent> {
        data(self.maker.prompt(index, p))
    }
    fn token(&mut self, index: usize, t: &TokenEvent, piece: Piece) -> Vec<SseEvent> {
        data(self.maker.token(index, t, piece))
    }
    fn done(&mut self, index: usize, f: &Finish, rest: Piece, called: bool) -> Vec<SseEvent> {
        data(self.maker.done(index, f, rest, called))
    }
    fn end(&mut self, u: Usage) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if self.include_usage {
            out.push(SseEvent::default().data(self.maker.usage(u)));
        }
        out.push(SseEvent::default().data("[DONE]"));
        out
    }
    fn error(&mut self, e: ApiError) -> Vec<SseEvent> {
        vec![SseEvent::default().data(e.body().to_string())]
    }
}
