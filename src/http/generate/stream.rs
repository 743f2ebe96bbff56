//! The SSE pump of a streamed answer: engine events in, through each choice's tool
//! reader, out as the API's events.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde_json::Value;
use sluice_engine::{EngineError, Event, EventStream, Finish, PromptToken, TokenEvent};
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use super::{deadline, log_summary, usage};
use crate::api::Usage;
use crate::error::ApiError;
use crate::reasoning::ReasoningStream;
use crate::tools::stream::{Piece, ToolStream};
use crate::validation::Validated;

/// What a streaming API sends for each engine event, as whole SSE events (named or not).
pub trait EventMaker: Send + 'static {
    /// Events sent before any token.
    fn start(&mut self) -> Vec<SseEvent>;
    /// Events for the scored prompt of choice `index`.
    fn prompt(&mut self, _index: usize, _p: &[PromptToken]) -> Vec<SseEvent> {
        Vec::new()
    }
    /// Events for a token of choice `index`; `piece` is what its text turns into: the
    /// text itself, or, when the request has tools, the content and the calls completed.
    fn token(&mut self, index: usize, t: &TokenEvent, piece: Piece) -> Vec<SseEvent>;
    /// Events closing choice `index`: `rest` is what the tool reader still held, `called`
    /// whether the choice made any call.
    fn done(&mut self, index: usize, f: &Finish, rest: Piece, called: bool) -> Vec<SseEvent>;
    /// Events after every choice finished, given the totals.
    fn end(&mut self, u: Usage) -> Vec<SseEvent>;
    /// The events sent when the request fails mid-stream; the stream then ends.
    fn error(&mut self, e: ApiError) -> Vec<SseEvent>;
}

/// A named event whose data is `head`'s fields, then `body`'s (both JSON objects).
pub fn named_event(kind: &str, mut head: Value, body: Value) -> SseEvent {
    if let (Some(m), Value::Object(fields)) = (head.as_object_mut(), body) {
        m.extend(fields);
    }
    SseEvent::default().event(kind).data(head.to_string())
}

/// How one streamed choice's text is read: its thinking split out first, then its tool
/// calls read out of the rest.
struct ChoiceReader {
    thinking: Option<ReasoningStream>,
    tools: Option<ToolStream>,
}

impl ChoiceReader {
    fn push(&mut self, text: &str) -> Piece {
        let (reasoning, content) = match &mut self.thinking {
            Some(r) => {
                let s = r.push(text);
                (s.reasoning, s.content)
            }
            None => (String::new(), text.to_string()),
        };
        let mut piece = self.push_content(&content);
        piece.reasoning = reasoning;
        piece
    }

    /// What is still held, and whether the choice made a call.
    fn finish(&mut self) -> (Piece, bool) {
        let mut piece = match &mut self.thinking {
            Some(r) => {
                let rest = r.finish();
                let mut p = self.push_content(&rest.content);
                p.reasoning = rest.reasoning;
                p
            }
            None => Piece::default(),
        };
        if let Some(t) = &mut self.tools {
            let last = t.finish();
            piece.content.push_str(&last.content);
            piece.calls.extend(last.calls);
        }
        let called = self.tools.as_ref().is_some_and(|t| t.calls() > 0);
        (piece, called)
    }

    /// Content (not thinking) through the tool reader.
    fn push_content(&mut self, content: &str) -> Piece {
        match &mut self.tools {
            Some(t) if !content.is_empty() => t.push(content),
            Some(_) => Piece::default(),
            None => Piece {
                content: content.to_string(),
                ..Piece::default()
            },
        }
    }
}

/// Streams every choice as the maker's SSE events. An engine error, or the shutdown
/// deadline, becomes the maker's error events, then the stream ends. When the client
/// goes away the pump stops and drops the event streams, cancelling the requests.
pub(super) fn sse<M: EventMaker>(
    streams: Vec<EventStream>,
    mut maker: M,
    v: &Validated,
    shutdown: watch::Receiver<bool>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>> + use<M>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    let span = tracing::Span::current();
    let n = v.n;
    let mut readers: Vec<ChoiceReader> = streams
        .iter()
        .map(|_| ChoiceReader {
            thinking: v.reasoning.map(|r| r.stream()),
            tools: v.tools.as_ref().map(|r| r.stream()),
        })
        .collect();
    tokio::spawn(
        async move {
            let total = streams.len();
            let mut merged = futures::stream::select_all(
                streams
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| ReceiverStream::new(s).map(move |e| (i, e))),
            );
            for c in maker.start() {
                if tx.send(c).await.is_err() {
                    return;
                }
            }
            let mut finishes = Vec::new();
            let shutdown = deadline(shutdown);
            tokio::pin!(shutdown);
            while finishes.len() < total {
                let next = tokio::select! {
                    _ = tx.closed() => return,
                    _ = &mut shutdown => Some((0, Event::Error(EngineError::ShuttingDown))),
                    next = merged.next() => next,
                };
                let chunks = match next {
                    Some((i, Event::Prompt(p))) => maker.prompt(i, &p),
                    // Beam searches are never streamed (validation refuses it).
                    Some((_, Event::Beams(_))) => Vec::new(),
                    Some((i, Event::Token(t))) => {
                        let piece = readers[i].push(&t.text);
                        maker.token(i, &t, piece)
                    }
                    Some((i, Event::Done(f))) => {
                        let (rest, called) = readers[i].finish();
                        let c = maker.done(i, &f, rest, called);
                        finishes.push((i, f));
                        c
                    }
                    Some((_, Event::Error(e))) => {
                        for c in maker.error(e.into()) {
                            let _ = tx.send(c).await;
                        }
                        return;
                    }
                    None => {
                        for c in maker.error(EngineError::Died.into()) {
                            let _ = tx.send(c).await;
                        }
                        return;
                    }
                };
                for c in chunks {
                    if tx.send(c).await.is_err() {
                        return;
                    }
                }
            }
            log_summary(&finishes, n);
            for c in maker.end(usage(finishes.into_iter(), n)) {
                if tx.send(c).await.is_err() {
                    return;
                }
            }
        }
        .instrument(span),
    );
    Sse::new(ReceiverStream::new(rx).map(Ok)).keep_alive(KeepAlive::default())
}
