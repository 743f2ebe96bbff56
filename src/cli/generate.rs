//! `sluice generate`: one greedy or seeded-sampled continuation, printed.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use sluice::engine::batch::{self, Job};
use sluice::engine::kv::KvSlab;
use sluice::engine::model::{GgufFile, Model};
use sluice::engine::sampling::SamplingParams;
use sluice::tokenizer::{ChatMessage, Tokenizer};

/// Options of `sluice generate`.
#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long, env = "SLUICE_MODEL")]
    model: Option<PathBuf>,
    /// A tokenizer.json to use instead of the GGUF vocabulary.
    #[arg(long, env = "SLUICE_TOKENIZER")]
    tokenizer: Option<PathBuf>,
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
    #[arg(long, value_name = "N")]
    logprobs: Option<usize>,
}

/// Runs `sluice generate`.
pub fn run(a: Args) -> anyhow::Result<()> {
    let path = a.model.unwrap_or_else(sluice::config::default_model_path);
    let file = GgufFile::open(&path)
        .with_context(|| format!("loading {} (run scripts/fetch-model?)", path.display()))?;
    let model = Model::from_file(&file)?;
    let tok = Tokenizer::from_gguf(&file, a.tokenizer.as_deref())?;
    let text = match (a.prompt, a.chat) {
        (Some(p), _) => p,
        (None, Some(c)) => tok.apply_chat_template(&[ChatMessage {
            role: "user".into(),
            content: c,
        }])?,
        (None, None) => bail!("give --prompt or --chat"),
    };
    let prompt = tok.encode(&text)?;
    if prompt.is_empty() {
        bail!("the prompt has no tokens");
    }
    let context = prompt.len() + a.max_tokens + 1;
    let c = &model.config;
    let mut kv = KvSlab::new(c.n_layers, c.n_kv_heads, c.head_dim, 1, context);
    let job = Job {
        prompt,
        max_tokens: a.max_tokens,
        params: SamplingParams {
            temperature: a.temperature,
            top_p: a.top_p,
            top_k: a.top_k,
            seed: a.seed,
            ..Default::default()
        },
        stop_ids: if a.ignore_eos {
            Vec::new()
        } else {
            tok.end_ids.clone()
        },
        top_logprobs: a.logprobs.unwrap_or(0),
    };
    let out = batch::run(&model, &mut kv, &[job]).remove(0);
    let mut stdout = std::io::stdout().lock();
    if a.logprobs.is_some() {
        let steps: Vec<_> = out
            .steps
            .iter()
            .map(|s| serde_json::json!({"id": s.token, "logprob": s.logprob, "top": s.top}))
            .collect();
        let v = serde_json::json!({"greedy_ids": out.ids, "steps": steps});
        writeln!(stdout, "{v}")?;
    } else if a.ids {
        let ids: Vec<String> = out.ids.iter().map(u32::to_string).collect();
        writeln!(stdout, "{}", ids.join(" "))?;
    } else {
        writeln!(stdout, "{}", tok.decode(&out.ids)?)?;
    }
    Ok(())
}
