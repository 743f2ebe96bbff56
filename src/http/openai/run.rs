//! Running validated requests on the engine: submission, collection into whole answers,
//! and the SSE pump shared by both endpoints.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use sluice_engine::{
    BeamOut, EngineError, EngineHandle, Event, EventStream, Finish, PromptToken, TokenEvent,
    Tokenizer, ValidRequest,
};
use tokio::sync::watch;

use std::collections::HashMap;

use crate::api::Usage;
use crate::api::scoring::{PromptLogprob, PromptLogprobs};
use crate::error::ApiError;

/// Everything one finished choice produced.
#[derive(Clone, Debug)]
pub struct Choice {
    /// Its text.
    pub text: String,
    /// Its tokens.
    pub tokens: Vec<TokenEvent>,
    /// Its totals.
    pub finish: Finish,
    /// The prompt's scores, when asked for.
    pub prompt: Vec<PromptToken>,
    /// A beam search's hypotheses, best first.
    pub beams: Vec<BeamOut>,
}

/// The choices' totals, indexed as laid out (`prompt * n + i`).
pub fn finishes(choices: &[Choice]) -> Vec<(usize, Finish)> {
    choices
        .iter()
        .map(|c| c.finish.clone())
        .enumerate()
        .collect()
}

/// Submits every request; if one is refused the others are dropped, which cancels them.
pub fn submit(
    engine: &EngineHandle,
    reqs: Vec<ValidRequest>,
) -> Result<Vec<EventStream>, ApiError> {
    reqs.into_iter()
        .map(|r| engine.submit(r).map_err(ApiError::from))
        .collect()
}

async fn collect_one(mut rx: EventStream) -> Result<Choice, ApiError> {
    let (mut text, mut tokens, mut prompt) = (String::new(), Vec::new(), Vec::new());
    let mut beams = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Prompt(p) => prompt = p,
            Event::Beams(b) => beams = b,
            Event::Token(t) => {
                text.push_str(&t.text);
                tokens.push(t);
            }
            Event::Done(finish) => {
                return Ok(Choice {
                    text,
                    tokens,
                    finish,
                    prompt,
                    beams,
                });
            }
            Event::Error(e) => return Err(e.into()),
        }
    }
    Err(EngineError::Died.into())
}

/// Resolves when the shutdown grace period has run out.
async fn deadline(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|passed| *passed).await.is_err() {
        // The sender lives as long as the server state: no deadline without it.
        std::future::pending::<()>().await;
    }
}

/// Waits for every choice to finish (or for the shutdown deadline: 503).
pub async fn collect(
    streams: Vec<EventStream>,
    shutdown: watch::Receiver<bool>,
) -> Result<Vec<Choice>, ApiError> {
    tokio::select! {
        r = futures::future::try_join_all(streams.into_iter().map(collect_one)) => r,
        _ = deadline(shutdown) => Err(EngineError::ShuttingDown.into()),
    }
}

/// Usage over choices laid out as `prompt * n + i`: the prompt counted once per prompt.
pub fn usage(finishes: impl Iterator<Item = (usize, Finish)>, n: usize) -> Usage {
    let mut u = Usage::default();
    for (i, f) in finishes {
        if i % n == 0 {
            u.prompt_tokens += f.prompt_tokens;
        }
        u.completion_tokens += f.completion_tokens;
    }
    u.total_tokens = u.prompt_tokens + u.completion_tokens;
    u
}

/// Logs the one summary line of a finished generation request (inside its request span).
pub fn log_summary(finishes: &[(usize, Finish)], n: usize) {
    let u = usage(finishes.iter().cloned(), n);
    let queue_ms = finishes
        .iter()
        .map(|(_, f)| f.queue_seconds)
        .fold(0.0, f64::max)
        * 1e3;
    let ttft_ms = finishes
        .iter()
        .map(|(_, f)| f.ttft_seconds)
        .fold(f64::INFINITY, f64::min)
        * 1e3;
    let reasons: Vec<&str> = finishes.iter().map(|(_, f)| f.reason.as_str()).collect();
    tracing::info!(
        status = 200,
        queue_ms,
        ttft_ms,
        prompt_tokens = u.prompt_tokens,
        completion_tokens = u.completion_tokens,
        finish_reason = reasons.join(","),
        "request finished"
    );
}

/// vLLM's `prompt_logprobs` of one prompt: null first, then per position the prompt's
/// token and the best `k` alternatives, keyed by token id.
pub fn prompt_logprobs(tok: &Tokenizer, p: &[PromptToken], k: usize) -> PromptLogprobs {
    p.iter()
        .map(|t| {
            let logprob = t.logprob?;
            let entry = |id: u32, rank, logprob| {
                let decoded_token = token_text(tok, id);
                (
                    id.to_string(),
                    PromptLogprob {
                        logprob,
                        rank,
                        decoded_token,
                    },
                )
            };
            let mut m: HashMap<_, _> = t
                .top
                .iter()
                .take(k)
                .enumerate()
                .map(|(r, &(id, l))| entry(id, r + 1, l))
                .collect();
            m.extend([entry(t.id, t.rank, logprob)]);
            Some(m)
        })
        .collect()
}

/// `best_of`: of each prompt's `copies` choices (laid out `prompt * copies + i`), the `n`
/// with the highest total log-probability, best first.
pub fn best_of(choices: Vec<Choice>, copies: usize, n: usize) -> Vec<Choice> {
    let mut out = Vec::new();
    let mut rest = choices.into_iter();
    loop {
        let mut group: Vec<Choice> = rest.by_ref().take(copies).collect();
        if group.is_empty() {
            return out;
        }
        // Computed for every token of a `best_of` request (`rank_by_logprob`).
        let total = |c: &Choice| {
            c.tokens
                .iter()
                .map(|t| t.logprob.map_or(f64::NEG_INFINITY, f64::from))
                .sum::<f64>()
        };
        group.sort_by(|a, b| total(b).total_cmp(&total(a)));
        out.extend(group.into_iter().take(n));
    }
}

/// A beam search's hypotheses as choices: each prompt's `n` best, in order.
pub fn beam_choices(choices: Vec<Choice>) -> Vec<Choice> {
    let mut out = Vec::new();
    for c in choices {
        for b in &c.beams {
            let mut finish = c.finish.clone();
            finish.reason = b.reason;
            finish.completion_tokens = b.tokens.len();
            out.push(Choice {
                text: b.text.clone(),
                tokens: b.tokens.clone(),
                finish,
                prompt: c.prompt.clone(),
                beams: Vec::new(),
            });
        }
    }
    out
}

/// Keeps a stream's `system_fingerprint` on the weights that generated its latest token
/// (a request queued across a reload runs on the new weights, not those of its arrival).
pub fn fingerprint(current: &mut String, t: &TokenEvent) {
    if let Some(v) = &t.weights_version
        && **v != **current
    {
        *current = v.to_string();
    }
}

/// The text of one token, for logprob listings.
pub fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id]).unwrap_or_default()
}

/// A new object id in the Responses and Anthropic style: `resp_…`, `msg_…`, `toolu_…`.
pub fn object_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A new request id with the given prefix.
pub fn request_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Turns engine events into the endpoint's SSE chunks (JSON strings).
pub trait ChunkMaker: Send + 'static {
    /// Chunks sent before any token (chat's role chunk, echoed prompts).
    fn start(&mut self) -> Vec<String>;
    /// The chunks for the scored prompt of choice `index`, when scores were asked for.
    fn prompt(&mut self, _index: usize, _p: &[PromptToken]) -> Vec<String> {
        Vec::new()
    }
    /// The chunks for a token of choice `index` (often one, possibly none).
    fn token(&mut self, index: usize, t: &TokenEvent) -> Vec<String>;
    /// The chunks closing choice `index` (the last one carries the finish reason).
    fn done(&mut self, index: usize, f: &Finish) -> Vec<String>;
    /// The usage chunk.
    fn usage(&mut self, u: Usage) -> String;
}

/// What a streaming endpoint sends for each engine event, as whole SSE events (named or
/// not). OpenAI's chat and completions chunks come through [`ChunkMaker`]; the Responses
/// and Messages APIs implement this directly.
pub trait EventMaker: Send + 'static {
    /// Events sent before any token.
    fn start(&mut self) -> Vec<SseEvent>;
    /// Events for the scored prompt of choice `index`.
    fn prompt(&mut self, index: usize, p: &[PromptToken]) -> Vec<SseEvent>;
    /// Events for a token of choice `index`.
    fn token(&mut self, index: usize, t: &TokenEvent) -> Vec<SseEvent>;
    /// Events closing choice `index`.
    fn done(&mut self, index: usize, f: &Finish) -> Vec<SseEvent>;
    /// Events after every choice finished, given the totals.
    fn end(&mut self, u: Usage) -> Vec<SseEvent>;
    /// The events sent when the request fails mid-stream; the stream then ends.
    fn error(&mut self, e: ApiError) -> Vec<SseEvent>;
}

/// OpenAI's framing of a [`ChunkMaker`]: unnamed `data:` events, an optional usage chunk,
/// `data: [DONE]`, errors as an error body.
struct OpenAiFrames<M> {
    maker: M,
    include_usage: bool,
}

fn data(chunks: Vec<String>) -> Vec<SseEvent> {
    chunks
        .into_iter()
        .map(|c| SseEvent::default().data(c))
        .collect()
}

impl<M: ChunkMaker> EventMaker for OpenAiFrames<M> {
    fn start(&mut self) -> Vec<SseEvent> {
        data(self.maker.start())
    }
    fn prompt(&mut self, index: usize, p: &[PromptToken]) -> Vec<SseEvent> {
        data(self.maker.prompt(index, p))
    }
    fn token(&mut self, index: usize, t: &TokenEvent) -> Vec<SseEvent> {
        data(self.maker.token(index, t))
    }
    fn done(&mut self, index: usize, f: &Finish) -> Vec<SseEvent> {
        data(self.maker.done(index, f))
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

/// Streams every choice as SSE: the maker's chunks, an optional usage chunk, then
/// `data: [DONE]` (see [`events`]).
pub fn sse<M: ChunkMaker>(
    streams: Vec<EventStream>,
    maker: M,
    n: usize,
    include_usage: bool,
    shutdown: watch::Receiver<bool>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let frames = OpenAiFrames {
        maker,
        include_usage,
    };
    events(streams, frames, n, shutdown)
}

/// Streams every choice as the maker's SSE events. An engine error, or the shutdown
/// deadline, becomes the maker's error events, then the stream ends. When the client
/// goes away the pump stops and drops the event streams, cancelling the requests.
pub fn events<M: EventMaker>(
    streams: Vec<EventStream>,
    mut maker: M,
    n: usize,
    shutdown: watch::Receiver<bool>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    let span = tracing::Span::current();
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
                    Some((i, Event::Token(t))) => maker.token(i, &t),
                    Some((i, Event::Done(f))) => {
                        let c = maker.done(i, &f);
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
