//! `sluice generate`: one greedy or seeded-sampled continuation, printed. It runs through
//! the engine handle exactly as a served request does.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::bail;
use sluice::config::default_model_path;
use sluice::engine::SamplingParams;
use sluice::engine::{ChatMessage, EngineConfig, EngineHandle, Event, Loaded, ValidRequest};

/// Options of `sluice generate`.
#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long, env = "SLUICE_MODEL")]
    model: Option<PathBuf>,
    /// A tokenizer.json to use instead of the GGUF vocabulary.
    #[arg(long, env = "SLUICE_TOKENIZER")]
    tokenizer: Option<PathBuf>,
    /// A Jinja chat template file to use instead of the model's.
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// What a Hugging Face folder's weight matrices are quantised to: q8_0, q4_0, q4_k, none.
    #[arg(long, default_value = "q8_0")]
    quantize: String,
    /// Raw prompt text (special tokens such as <|im_start|> are parsed).
    #[arg(long, conflicts_with = "chat", required_unless_present = "chat")]
    prompt: Option<String>,
    /// A user message, rendered through the model's chat template.
    #[arg(long)]
    chat: Option<String>,
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 32)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Top-p (nucleus) cut-off.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Top-k cut-off; 0 disables.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Seed of the random stream.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep generating through end-of-sequence tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Print token ids instead of text.
    #[arg(long)]
    ids: bool,
    /// Print JSON: generated ids and the top-N log-probabilities of every step.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=100))]
    logprobs: Option<u16>,
}

/// Runs `sluice generate` through the engine, as the server does.
pub fn run(a: Args) -> anyhow::Result<()> {
    let path = a.model.unwrap_or_else(default_model_path);
    let Loaded {
        model, tokenizer, ..
    } = sluice::load_model(
        &path,
        &sluice::engine::LoadOptions {
            tokenizer: a.tokenizer.clone(),
            chat_template: a.chat_template.clone(),
            quantize: sluice::config::quantize(&a.quantize)?,
        },
    )?;
    let text = match (a.prompt, a.chat) {
        (Some(p), _) => p,
        (None, Some(c)) => tokenizer.apply_chat_template(&[ChatMessage {
            role: "user".into(),
            content: c,
            ..Default::default()
        }])?,
        (None, None) => bail!("give --prompt or --chat"),
    };
    let prompt = tokenizer.encode(&text)?;
    if prompt.is_empty() {
        bail!("the prompt has no tokens");
    }
    if a.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    let tokenizer = Arc::new(tokenizer);
    let config = EngineConfig {
        slots: 1,
        context: prompt.len() + a.max_tokens,
        ..EngineConfig::default()
    };
    let engine = EngineHandle::start(model, tokenizer.clone(), config);
    let mut req = ValidRequest::greedy(prompt, a.max_tokens);
    req.params = SamplingParams {
        temperature: a.temperature,
        top_p: a.top_p,
        top_k: a.top_k,
        seed: a.seed,
        ..Default::default()
    };
    if !a.ignore_eos {
        req.stop_ids = tokenizer.end_ids.clone();
    }
    req.logprobs = a.logprobs.map(usize::from);
    req.route = "generate";
    let mut rx = engine.submit(req)?;
    let mut tokens = Vec::new();
    loop {
        match rx.blocking_recv() {
            Some(Event::Token(t)) => tokens.push(t),
            Some(Event::Done(_)) => break,
            Some(Event::Prompt(_) | Event::Beams(_)) => {}
            Some(Event::Error(e)) => return Err(e.into()),
            None => bail!("the engine stopped"),
        }
    }
    let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
    let mut stdout = std::io::stdout().lock();
    if a.logprobs.is_some() {
        let steps: Vec<_> = tokens
            .iter()
            .map(|s| serde_json::json!({"id": s.id, "logprob": s.logprob, "top": s.top}))
            .collect();
        let v = serde_json::json!({"greedy_ids": ids, "steps": steps});
        writeln!(stdout, "{v}")?;
    } else if a.ids {
        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(stdout, "{}", ids.join(" "))?;
    } else {
        writeln!(stdout, "{}", tokenizer.decode(&ids)?)?;
    }
    Ok(())
}
