//! Run-to-completion generation of a fixed batch of prompts: one prefill pass, then one
//! decode step per token. `sluice generate`, the reference tests and the benchmarks use it;
//! the serving loop in `worker` adds queueing and slot refill on top of the same steps.

use super::kv::KvSlab;
use super::model::{Model, TokenRow};
use super::sampling::{History, Sampled, SamplingParams, sample};

/// One sequence to generate.
#[derive(Clone, Debug)]
pub struct Job {
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Sampling parameters.
    pub params: SamplingParams,
    /// Ids that end this sequence (empty with ignore-EOS).
    pub stop_ids: Vec<u32>,
    /// Alternatives to report per step.
    pub top_logprobs: usize,
}

/// What a sequence produced: one entry per generated token.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Output {
    /// Generated ids.
    pub ids: Vec<u32>,
    /// The sampler's record of each step.
    pub steps: Vec<Sampled>,
}

/// Prompt rows of every job, packed without padding: job j uses slot j.
pub fn prefill_rows(prompts: &[&[u32]]) -> (Vec<TokenRow>, Vec<usize>) {
    let mut rows = Vec::new();
    let mut last = Vec::new();
    for (slot, p) in prompts.iter().enumerate() {
        for (pos, &token) in p.iter().enumerate() {
            rows.push(TokenRow { token, slot, pos });
        }
        last.push(rows.len() - 1);
    }
    (rows, last)
}

/// Generates every job to completion in slots `0..jobs.len()` of `kv`.
pub fn run(model: &Model, kv: &mut KvSlab, jobs: &[Job]) -> Vec<Output> {
    assert!(jobs.len() <= kv.slots, "more jobs than KV slots");
    let vocab = model.config.vocab;
    let prompts: Vec<&[u32]> = jobs.iter().map(|j| j.prompt.as_slice()).collect();
    let (rows, last) = prefill_rows(&prompts);
    let mut logits = model.forward(kv, &rows, &last);
    let mut outs = vec![Output::default(); jobs.len()];
    let mut active: Vec<usize> = (0..jobs.len())
        .filter(|&j| jobs[j].max_tokens > 0)
        .collect();
    let mut live: Vec<usize> = (0..jobs.len()).collect();
    while !active.is_empty() {
        let mut next = Vec::new();
        for (row, &j) in live.iter().enumerate() {
            if !active.contains(&j) {
                continue;
            }
            let job = &jobs[j];
            let hist = History {
                prompt: job.prompt.clone(),
                generated: outs[j].ids.clone(),
            };
            let step = outs[j].ids.len() as u64;
            let s = sample(
                &logits[row * vocab..(row + 1) * vocab],
                &job.params,
                &hist,
                step,
                job.top_logprobs,
            );
            let done = job.stop_ids.contains(&s.token)
                || outs[j].ids.len() + 1 >= job.max_tokens
                || job.prompt.len() + outs[j].ids.len() + 1 >= kv.context;
            outs[j].ids.push(s.token);
            outs[j].steps.push(s);
            if !done {
                next.push(j);
            }
        }
        active = next;
        if active.is_empty() {
            break;
        }
        let rows: Vec<TokenRow> = active
            .iter()
            .map(|&j| TokenRow {
                token: *outs[j]
                    .ids
                    .last()
                    .expect("an active job has sampled a token"),
                slot: j,
                pos: jobs[j].prompt.len() + outs[j].ids.len() - 1,
            })
            .collect();
        let want: Vec<usize> = (0..rows.len()).collect();
        logits = model.forward(kv, &rows, &want);
        live = active.clone();
    }
    outs
}
