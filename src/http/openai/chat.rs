//! `POST /v1/chat/completions`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::run::{self, ChunkMaker, request_id, token_text};
use crate::api::{
    ChatChoice, ChatChunk, ChatChunkChoice, ChatDelta, ChatLogprobs, ChatMessageOut, ChatRequest,
    ChatResponse, ChatTokenLogprob, GenerationErrors, TopLogprob, Usage,
};
use crate::error::ApiError;
use crate::http::json::Json;
use crate::http::{AppState, off_thread};
use crate::validation;
use sluice_engine::{Finish, TokenEvent, Tokenizer};

/// Logprobs of `tokens` in the chat format.
fn logprobs(tok: &Tokenizer, tokens: &[TokenEvent]) -> ChatLogprobs {
    let entry = |id: u32, logprob: f32| {
        let token = token_text(tok, id);
        TopLogprob {
            bytes: token.as_bytes().to_vec(),
            token,
            logprob,
        }
    };
    ChatLogprobs {
        content: tokens
            .iter()
            .filter(|t| !t.is_end)
            .map(|t| {
                let e = entry(t.id, t.logprob);
                ChatTokenLogprob {
                    token: e.token,
                    logprob: e.logprob,
                    bytes: e.bytes,
                    top_logprobs: t.top.iter().map(|&(id, l)| entry(id, l)).collect(),
                }
            })
            .collect(),
    }
}

struct Chunks {
    tok: Arc<Tokenizer>,
    base: ChatChunk,
    choices: usize,
    want_logprobs: bool,
}

impl Chunks {
    fn chunk(&self, choice: ChatChunkChoice) -> String {
        let mut c = self.base.clone();
        c.choices = vec![choice];
        serde_json::to_string(&c).expect("chat chunks serialise")
    }
}

impl ChunkMaker for Chunks {
    fn start(&mut self) -> Vec<String> {
        (0..self.choices)
            .map(|index| {
                self.chunk(ChatChunkChoice {
                    index,
                    delta: ChatDelta {
                        role: Some("assistant"),
                        content: Some(String::new()),
                    },
                    logprobs: None,
                    finish_reason: None,
                })
            })
            .collect()
    }

    fn token(&mut self, index: usize, t: &TokenEvent) -> Option<String> {
        let lp =
            (self.want_logprobs && !t.is_end).then(|| logprobs(&self.tok, std::slice::from_ref(t)));
        if t.text.is_empty() && lp.is_none() {
            return None;
        }
        Some(self.chunk(ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content: Some(t.text.clone()),
            },
            logprobs: lp,
            finish_reason: None,
        }))
    }

    fn done(&mut self, index: usize, f: &Finish) -> String {
        self.chunk(ChatChunkChoice {
            index,
            delta: ChatDelta::default(),
            logprobs: None,
            finish_reason: Some(f.reason.as_str()),
        })
    }

    fn usage(&mut self, u: Usage) -> String {
        let mut c = self.base.clone();
        c.choices = Vec::new();
        c.usage = Some(u);
        serde_json::to_string(&c).expect("usage chunk serialises")
    }
}

/// Answers a conversation, whole or streamed.
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    operation_id = "create_chat_completion",
    tag = "openai",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The answer; with `stream: true`, `text/event-stream` `ChatChunk`s, then `data: [DONE]`", body = ChatResponse),
        GenerationErrors,
    )
)]
pub async fn handle(
    State(s): State<AppState>,
    Json(r): Json<ChatRequest>,
) -> Result<Response, ApiError> {
    s.check_open()?;
    let st = s.clone();
    let v =
        off_thread(move || validation::chat(&r, &st.tokenizer, &st.limits, &st.model_name)).await?;
    let want_logprobs = v.requests.first().is_some_and(|r| r.logprobs.is_some());
    let streams = run::submit(&s.engine, v.requests.clone())?;
    let id = request_id("chatcmpl");
    let created = crate::http::unix_now();
    let version = s.engine.weights_version().to_string();
    if v.stream {
        let maker = Chunks {
            tok: s.tokenizer.clone(),
            base: ChatChunk {
                id,
                object: "chat.completion.chunk",
                created,
                model: s.model_name.to_string(),
                system_fingerprint: version,
                choices: Vec::new(),
                usage: None,
            },
            choices: streams.len(),
            want_logprobs,
        };
        let shutdown = s.deadline.subscribe();
        return Ok(run::sse(streams, maker, v.n, v.include_usage, shutdown).into_response());
    }
    let choices = run::collect(streams, s.deadline.subscribe()).await?;
    let finishes = run::finishes(&choices);
    run::log_summary(&finishes, v.n);
    let mut resp = ChatResponse {
        id,
        object: "chat.completion",
        created,
        model: s.model_name.to_string(),
        system_fingerprint: version,
        choices: Vec::new(),
        usage: run::usage(finishes.into_iter(), v.n),
    };
    for (index, c) in choices.into_iter().enumerate() {
        resp.system_fingerprint = c.finish.weights_version.clone();
        resp.choices.push(ChatChoice {
            index,
            logprobs: want_logprobs.then(|| logprobs(&s.tokenizer, &c.tokens)),
            message: ChatMessageOut {
                role: "assistant",
                content: c.text,
            },
            finish_reason: Some(c.finish.reason.as_str()),
        });
    }
    Ok(axum::Json(resp).into_response())
}
