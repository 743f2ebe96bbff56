//! `POST /v1/completions`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};

use super::stream::{ChunkMaker, Frames};
use super::{fingerprint, prompt_logprobs, request_id, token_text, want_logprobs};
use crate::api::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse, GenerationErrors,
    Usage,
};
use crate::http::AppState;
use crate::http::generate::{Api, Choice, route};
use crate::tools::stream::Piece;
use crate::validation::{self, Validated, ValidationError};
use sluice_engine::{Finish, PromptToken, TokenEvent, Tokenizer};

/// Logprobs in the completions format: the scored prompt's tokens (under `echo`; the
/// first has null), then the generated ones (an end token included: its text is not in the
/// choice's text), offsets counted from `offset`.
fn logprobs(
    tok: &Tokenizer,
    prompt: &[PromptToken],
    tokens: &[TokenEvent],
    mut offset: usize,
) -> CompletionLogprobs {
    let mut lp = CompletionLogprobs::default();
    let mut add = |id: u32, logprob: Option<f32>, top: &[(u32, f32)], shown: bool| {
        let text = token_text(tok, id);
        lp.text_offset.push(offset);
        if shown {
            offset += text.len();
        }
        lp.tokens.push(text);
        lp.token_logprobs.push(logprob);
        lp.top_logprobs.push(logprob.map(|_| {
            top.iter()
                .map(|&(id, l)| (token_text(tok, id), l))
                .collect::<HashMap<_, _>>()
        }));
    };
    for t in prompt {
        add(t.id, t.logprob, &t.top, true);
    }
    for t in tokens {
        add(t.id, t.logprob, &t.top, !t.is_end);
    }
    lp
}

struct Chunks {
    tok: Arc<Tokenizer>,
    base: CompletionResponse,
    echo: Vec<String>,
    n: usize,
    want_logprobs: bool,
    /// `prompt_logprobs`: alternatives per prompt token.
    prompt_logprobs: Option<usize>,
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
        self.chunk_with(CompletionChoice {
            index,
            text,
            logprobs,
            finish_reason: finish,
            prompt_logprobs: None,
        })
    }

    fn chunk_with(&self, choice: CompletionChoice) -> String {
        let mut c = self.base.clone();
        c.choices = vec![choice];
        serde_json::to_string(&c).expect("completion chunks serialise")
    }
}

impl Chunks {
    /// The echoed prompt waits for its scores when they were asked for.
    fn scores_prompt(&self) -> bool {
        self.prompt_logprobs.is_some() || (self.want_logprobs && !self.echo.is_empty())
    }
}

impl ChunkMaker for Chunks {
    fn prompt(&mut self, index: usize, p: &[PromptToken]) -> Vec<String> {
        let text = self.echo.get(index / self.n).cloned().unwrap_or_default();
        self.offsets.insert(index, text.len());
        let lp =
            (self.want_logprobs && !self.echo.is_empty()).then(|| logprobs(&self.tok, p, &[], 0));
        vec![
            self.chunk_with(CompletionChoice {
                index,
                text,
                logprobs: lp,
                finish_reason: None,
                prompt_logprobs: self
                    .prompt_logprobs
                    .map(|k| prompt_logprobs(&self.tok, p, k)),
            }),
        ]
    }

    fn start(&mut self) -> Vec<String> {
        let mut v = Vec::new();
        if self.scores_prompt() {
            return v;
        }
        for (p, text) in self.echo.clone().iter().enumerate() {
            for i in 0..self.n {
                self.offsets.insert(p * self.n + i, text.len());
                v.push(self.chunk(p * self.n + i, text.clone(), None, None));
            }
        }
        v
    }

    fn token(&mut self, index: usize, t: &TokenEvent, _: Piece) -> Vec<String> {
        fingerprint(&mut self.base.system_fingerprint, t);
        let lp = self.want_logprobs.then(|| {
            let off = self.offsets.entry(index).or_default();
            let lp = logprobs(&self.tok, &[], std::slice::from_ref(t), *off);
            if !t.is_end {
                *off += lp.tokens.iter().map(String::len).sum::<usize>();
            }
            lp
        });
        if t.text.is_empty() && lp.is_none() {
            return Vec::new();
        }
        vec![self.chunk(index, t.text.clone(), lp, None)]
    }

    fn done(&mut self, index: usize, f: &Finish, _: Piece, _: bool) -> Vec<String> {
        vec![self.chunk(index, String::new(), None, Some(f.reason.as_str()))]
    }

    fn usage(&mut self, u: Usage) -> String {
        let mut c = self.base.clone();
        c.choices = Vec::new();
        c.usage = Some(u);
        serde_json::to_string(&c).expect("usage chunk serialises")
    }
}

/// `best_of`: of each prompt's `copies` choices (laid out `prompt * copies + i`), the `n`
/// with the highest total log-probability, best first.
fn best_of(choices: Vec<Choice>, copies: usize, n: usize) -> Vec<Choice> {
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
fn beam_choices(choices: Vec<Choice>) -> Vec<Choice> {
    let mut out = Vec::new();
    for c in choices {
        for b in &c.beams {
            let mut finish = c.finish.clone();
            finish.reason = b.reason;
            finish.completion_tokens = b.tokens.len();
            out.push(Choice {
                text: b.text.clone(),
                reasoning: String::new(),
                calls: Vec::new(),
                tokens: b.tokens.clone(),
                finish,
                prompt: c.prompt.clone(),
                beams: Vec::new(),
            });
        }
    }
    out
}

/// A completion as it starts: the response every chunk and the whole answer copy.
struct Completions(CompletionResponse);

impl Api for Completions {
    type Request = CompletionRequest;
    type Events = Frames<Chunks>;

    fn model(r: &CompletionRequest) -> Option<&str> {
        r.common.model.as_deref()
    }

    fn validate(r: &CompletionRequest, s: &AppState) -> Result<Validated, ValidationError> {
        validation::completion(
            r,
            &s.tokenizer,
            s.grammars.as_deref(),
            &s.limits,
            &s.model_name,
        )
    }

    fn start(_: CompletionRequest, _: &Validated, s: &AppState) -> Self {
        Completions(CompletionResponse {
            id: request_id("cmpl"),
            object: "text_completion",
            created: crate::http::unix_now(),
            model: s.model_name.to_string(),
            system_fingerprint: s.engine.weights_version().to_string(),
            choices: Vec::new(),
            usage: None,
        })
    }

    fn events(self, v: &Validated, s: &AppState) -> Frames<Chunks> {
        let chunks = Chunks {
            tok: s.tokenizer.clone(),
            base: self.0,
            echo: if v.echo {
                v.prompt_texts.clone()
            } else {
                Vec::new()
            },
            n: v.n,
            want_logprobs: want_logprobs(v),
            prompt_logprobs: v.prompt_logprobs,
            offsets: HashMap::new(),
        };
        Frames::new(chunks, v.include_usage)
    }

    fn answer(self, v: &Validated, choices: Vec<Choice>, usage: Usage, s: &AppState) -> Response {
        let mut base = self.0;
        base.usage = Some(usage);
        let choices = match v.best_of {
            Some(b) => best_of(choices, b, v.n),
            None if v.beam => beam_choices(choices),
            None => choices,
        };
        for (i, c) in choices.iter().enumerate() {
            base.system_fingerprint = c.finish.weights_version.clone();
            let prefix = if v.echo {
                v.prompt_texts[i / v.n].clone()
            } else {
                String::new()
            };
            let scored: &[PromptToken] = if v.echo { &c.prompt } else { &[] };
            base.choices.push(CompletionChoice {
                index: i,
                logprobs: want_logprobs(v).then(|| logprobs(&s.tokenizer, scored, &c.tokens, 0)),
                text: prefix + &c.text,
                finish_reason: Some(c.finish.reason.as_str()),
                prompt_logprobs: v
                    .prompt_logprobs
                    .map(|k| prompt_logprobs(&s.tokenizer, &c.prompt, k)),
            });
        }
        axum::Json(base).into_response()
    }
}

route! {
    /// Generates completions for one or more prompts, whole or streamed.
    Completions: post "/v1/completions", operation_id "create_completion", tag "openai",
    CompletionRequest => CompletionResponse: "The completion; with `stream: true`, `text/event-stream` chunks of the same shape, then `data: [DONE]`",
    GenerationErrors
}
