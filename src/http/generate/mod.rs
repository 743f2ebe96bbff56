//! The one way a generation request runs, whatever its API (completions, chat, Responses,
//! Messages): refused while the server drains, validated on the blocking pool,
//! submitted, then streamed as SSE or collected into whole choices, tool calls read out
//! of the text, and one summary line logged. What differs per API is an [`Api`].

mod stream;

pub use stream::{EventMaker, named_event};

use axum::response::{IntoResponse, Response};
use sluice_engine::{BeamOut, EngineError, EngineHandle, Event, EventStream, Finish, PromptToken};
use sluice_engine::{TokenEvent, ValidRequest};
use tokio::sync::watch;

use super::{AppState, ServerState, off_thread};
use crate::api::{ChatRequest, Usage};
use crate::error::ApiError;
use crate::tools::parse::ParsedCall;
use crate::validation::{self, Fields, Validated, ValidationError};

/// What one generation API does its own way: read its request, and shape the streamed
/// and the whole answer. A value of it is what the answer starts from (its id and time).
pub trait Api: Sized + 'static {
    /// The request body.
    type Request: Send + 'static;
    /// The events of a streamed answer.
    type Events: EventMaker;
    /// The model the request names (`None`: the default model).
    fn model(r: &Self::Request) -> Option<&str>;
    /// Checks the request and makes its engine requests (on the blocking pool).
    fn validate(r: &Self::Request, s: &AppState) -> Result<Validated, ValidationError>;
    /// What the answer starts from, made once the requests are submitted.
    fn start(r: Self::Request, v: &Validated, s: &AppState) -> Self;
    /// The events of the streamed answer.
    fn events(self, v: &Validated, s: &AppState) -> Self::Events;
    /// The whole answer: every choice (laid out `prompt * copies + i`, tool calls read
    /// out of their text) and the totals.
    fn answer(self, v: &Validated, choices: Vec<Choice>, usage: Usage, s: &AppState) -> Response;
}

/// Runs one generation request of API `A`, whole or streamed, on the model it names.
pub async fn generate<A: Api>(server: ServerState, r: A::Request) -> Result<Response, ApiError> {
    if server.draining.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(crate::error::HttpError::Draining.into());
    }
    let s = server.model(A::model(&r)).await?;
    s.check_open()?;
    let st = s.clone();
    let (r, v) = off_thread(move || A::validate(&r, &st).map(|v| (r, v))).await?;
    let streams = submit(&s.engine, v.requests.clone())?;
    let api = A::start(r, &v, &s);
    if v.stream {
        let events = api.events(&v, &s);
        let sse = stream::sse(streams, events, &v, s.common.deadline.subscribe());
        return Ok(sse.into_response());
    }
    let mut choices = collect(streams, s.common.deadline.subscribe()).await?;
    let finishes = finishes(&choices);
    log_summary(&finishes, v.copies());
    let usage = usage(finishes.into_iter(), v.copies());
    if let Some(reader) = &v.reasoning {
        for c in &mut choices {
            let split = reader.read(&c.text);
            c.reasoning = split.reasoning;
            c.text = split.content;
        }
    }
    if let Some(reader) = &v.tools {
        for c in &mut choices {
            let p = reader.read(&c.text);
            c.text = p.content;
            c.calls = p.calls;
        }
    }
    Ok(api.answer(&v, choices, usage, &s))
}

/// Declares `handle`, the route of generation API `$api` (it runs the request through
/// [`generate`]), with its OpenAPI description: `POST` at the path, the operation id and
/// tag, the request and answer types, what the answer is, then the error responses.
macro_rules! route {
    (
        $(#[doc = $doc:tt])*
        $api:ident: post $path:tt, operation_id $id:tt, tag $tag:tt,
        $request:ident => $answer:ident: $what:tt,
        $($errors:tt)+
    ) => {
        $(#[doc = $doc])*
        #[utoipa::path(
            post,
            path = $path,
            operation_id = $id,
            tag = $tag,
            request_body = $request,
            responses((status = 200, description = $what, body = $answer), $($errors)+)
        )]
        pub async fn handle(
            axum::extract::State(s): axum::extract::State<crate::http::ServerState>,
            crate::http::json::Json(r): crate::http::json::Json<$request>,
        ) -> Result<axum::response::Response, crate::error::ApiError> {
            crate::http::generate::generate::<$api>(s, r).await
        }
    };
}
pub(crate) use route;

/// Validates a chat request, or one made from another API's, against the server's
/// tokenizer, grammars and limits; `fields` are the names the client's API gives them.
pub fn validate_chat(
    r: &ChatRequest,
    fields: &Fields,
    s: &AppState,
) -> Result<Validated, ValidationError> {
    validation::chat(
        r,
        fields,
        &s.tokenizer,
        s.grammars.as_deref(),
        s.tool_parser,
        &s.limits,
        &s.model_name,
    )
}

/// Everything one finished choice produced.
#[derive(Clone, Debug)]
pub struct Choice {
    /// Its text (the content around the calls when the request has tools, after the
    /// thinking when the model thinks).
    pub text: String,
    /// Its thinking, when the model thinks.
    pub reasoning: String,
    /// The tool calls read out of its text.
    pub calls: Vec<ParsedCall>,
    /// Its tokens.
    pub tokens: Vec<TokenEvent>,
    /// Its totals.
    pub finish: Finish,
    /// The prompt's scores, when asked for.
    pub prompt: Vec<PromptToken>,
    /// A beam search's hypotheses, best first.
    pub beams: Vec<BeamOut>,
}

/// The choices' totals, indexed as laid out.
fn finishes(choices: &[Choice]) -> Vec<(usize, Finish)> {
    choices
        .iter()
        .map(|c| c.finish.clone())
        .enumerate()
        .collect()
}

/// Submits every request; if one is refused the others are dropped, which cancels them.
fn submit(engine: &EngineHandle, reqs: Vec<ValidRequest>) -> Result<Vec<EventStream>, ApiError> {
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
                    reasoning: String::new(),
                    calls: Vec::new(),
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
async fn collect(
    streams: Vec<EventStream>,
    shutdown: watch::Receiver<bool>,
) -> Result<Vec<Choice>, ApiError> {
    tokio::select! {
        r = futures::future::try_join_all(streams.into_iter().map(collect_one)) => r,
        _ = deadline(shutdown) => Err(EngineError::ShuttingDown.into()),
    }
}

/// Usage over choices laid out as `prompt * n + i`: the prompt counted once per prompt.
fn usage(finishes: impl Iterator<Item = (usize, Finish)>, n: usize) -> Usage {
    let mut u = Usage::default();
    for (i, f) in finishes {
        if i % n == 0 {
            u.prompt_tokens += f.prompt_tokens;
        }
        u.completion_tokens += f.completion_tokens;
        if f.reasoning_tokens > 0 {
            u.completion_tokens_details
                .get_or_insert_default()
                .reasoning_tokens += f.reasoning_tokens;
        }
    }
    u.total_tokens = u.prompt_tokens + u.completion_tokens;
    u
}

/// Logs the one summary line of a finished generation request (inside its request span).
fn log_summary(finishes: &[(usize, Finish)], n: usize) {
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

/// A new object id in the Responses and Anthropic style: `resp_…`, `msg_…`, `toolu_…`.
pub fn object_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}
