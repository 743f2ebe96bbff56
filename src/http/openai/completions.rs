//! `POST /v1/completions`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::run::{self, ChunkMaker, request_id, token_text};
use crate::api::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse, GenerationErrors,
    Usage,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{AppState, off_thread};
use crate::validation;
use sluice_engine::{Finish, TokenEvent, Tokenizer};

/// Logprobs of `tokens` in the completions format, offsets counted from `offset`.
fn logprobs(tok: &Tokenizer, tokens: &[TokenEvent], mut offset: usize) -> CompletionLogprobs {
    let mut lp = CompletionLogprobs::default();
    for t in tokens.iter().filter(|t| !t.is_end) {
        let text = token_text(tok, t.id);
        lp.text_offset.push(offset);
        offset += text.len();
        lp.tokens.push(text);
        lp.token_logprobs.push(t.logprob);
        lp.top_logprobs.push(
            t.top
                .iter()
                .map(|&(id, l)| (token_text(tok, id), l))
                .collect::<HashMap<_, _>>(),
        );
    }
    lp
}

struct Chunks {
    tok: Arc<Tokenizer>,
    base: CompletionResponse,
    echo: Vec<String>,
    n: usize,
    want_logprobs: bool,
    offsets: HashMap<usize, usize>,
}

impl Chunks {
    fn chunk(
        &self,
        index: usize,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish: Option<&'static str>,
    ) -> String {
        let mut c = self.base.clone();
        c.choices = vec![CompletionChoice {
            index,
            text,
            logprobs,
            finish_reason: finish,
        }];
        serde_json::to_string(&c).expect("completion chunks serialise")
    }
}

impl ChunkMaker for Chunks {
    fn start(&mut self) -> Vec<String> {
        let mut v = Vec::new();
        for (p, text) in self.echo.clone().iter().enumerate() {
            for i in 0..self.n {
                self.offsets.insert(p * self.n + i, text.len());
                v.push(self.chunk(p * self.n + i, text.clone(), None, None));
            }
        }
        v
    }

    fn token(&mut self, index: usize, t: &TokenEvent) -> Vec<String> {
        let lp = (self.want_logprobs && !t.is_end).then(|| {
            let off = self.offsets.entry(index).or_default();
            let lp = logprobs(&self.tok, std::slice::from_ref(t), *off);
            *off += lp.tokens.iter().map(String::len).sum::<usize>();
            lp
        });
        if t.text.is_empty() && lp.is_none() {
            return Vec::new();
        }
        vec![self.chunk(index, t.text.clone(), lp, None)]
    }

    fn done(&mut self, index: usize, f: &Finish) -> Vec<String> {
        vec![self.chunk(index, String::new(), None, Some(f.reason.as_str()))]
    }

    fn usage(&mut self, u: Usage) -> String {
        let mut c = self.base.clone();
        c.choices = Vec::new();
        c.usage = Some(u);
        serde_json::to_string(&c).expect("usage chunk serialises")
    }
}

/// Generates completions for one or more prompts, whole or streamed.
#[utoipa::path(
    post,
    path = "/v1/completions",
    operation_id = "create_completion",
    tag = "openai",
    request_body = CompletionRequest,
    responses(
        (status = 200, description = "The completion; with `stream: true`, `text/event-stream` chunks of the same shape, then `data: [DONE]`", body = CompletionResponse),
        GenerationErrors,
    )
)]
pub async fn handle(
    State(s): State<AppState>,
    Json(r): Json<CompletionRequest>,
) -> Result<Response, ApiError> {
    s.check_open()?;
    let st = s.clone();
    let v = off_thread(move || {
        validation::completion(
            &r,
            &st.tokenizer,
            st.grammars.as_deref(),
            &st.limits,
            &st.model_name,
        )
    })
    .await?;
    let streams = run::submit(&s.engine, v.requests.clone())?;
    let mut base = CompletionResponse {
        id: request_id("cmpl"),
        object: "text_completion",
        created: crate::http::unix_now(),
        model: s.model_name.to_string(),
        system_fingerprint: s.engine.weights_version().to_string(),
        choices: Vec::new(),
        usage: None,
    };
    let want_logprobs = v.requests.first().is_some_and(|r| r.logprobs.is_some());
    if v.stream {
        let maker = Chunks {
            tok: s.tokenizer.clone(),
            base,
            echo: if v.echo {
                v.prompt_texts.clone()
            } else {
                Vec::new()
            },
            n: v.n,
            want_logprobs,
            offsets: HashMap::new(),
        };
        let shutdown = s.deadline.subscribe();
        return Ok(run::sse(streams, maker, v.n, v.include_usage, shutdown).into_response());
    }
    let choices = run::collect(streams, s.deadline.subscribe()).await?;
    let finishes = run::finishes(&choices);
    run::log_summary(&finishes, v.n);
    for (i, c) in choices.iter().enumerate() {
        base.system_fingerprint = c.finish.weights_version.clone();
        let prefix = if v.echo {
            v.prompt_texts[i / v.n].clone()
        } else {
            String::new()
        };
        base.choices.push(CompletionChoice {
            index: i,
            logprobs: want_logprobs.then(|| logprobs(&s.tokenizer, &c.tokens, prefix.len())),
            text: prefix + &c.text,
            finish_reason: Some(c.finish.reason.as_str()),
        });
    }
    base.usage = Some(run::usage(finishes.into_iter(), v.n));
    Ok(axum::Json(base).into_response())
}
