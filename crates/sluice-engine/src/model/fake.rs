//! A tiny deterministic model for unit tests of the engine loop: no file, no weights.
//! Greedy decoding from token `t` always gives `(t + step) % vocab`; it records every
//! forward call, can hold its first call until the test releases it (so that a test can
//! queue requests deterministically), and panics on [`PANIC_TOKEN`]. In its summing form
//! ([`FakeModel::summing`]) the next token is `(sum of the tokens at positions 0..=pos,
//! read back from the KV pool through the slot's block table + step) % vocab`, so a block
//! shared, copied or recomputed wrongly changes the tokens.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::{Model, Shape, TokenRow};
use crate::kv::KvSlab;

/// Vocabulary size of the fake model.
pub const VOCAB: usize = 32;
/// A token whose presence in a forward call makes the model panic.
pub const PANIC_TOKEN: u32 = 31;

/// See the module documentation.
pub struct FakeModel {
    shape: Shape,
    step: u32,
    /// Whether the next token sums the sequence read back from the KV pool.
    sums: bool,
    /// Every forward call's rows, in order.
    pub calls: Arc<Mutex<Vec<Vec<TokenRow>>>>,
    gate: Mutex<Option<Gate>>,
}

/// Holds forward call number `at`: signals `entered`, then waits on `release`.
struct Gate {
    at: usize,
    entered: Sender<()>,
    release: Receiver<()>,
}

impl FakeModel {
    /// A model whose next token is `(t + step) % VOCAB`.
    pub fn new(step: u32) -> Self {
        Self {
            shape: Shape {
                arch: "fake".into(),
                n_layers: 1,
                n_kv_heads: 1,
                head_dim: 16,
                vocab: VOCAB,
                train_context: 64,
                attention_break_even: 0,
            },
            step,
            sums: false,
            calls: Arc::default(),
            gate: Mutex::new(None),
        }
    }

    /// A model whose next token is `(sum of the sequence's tokens + step) % VOCAB`, the
    /// sum read from the KV pool (see the module documentation).
    pub fn summing(step: u32) -> Self {
        Self {
            sums: true,
            ..Self::new(step)
        }
    }

    /// With `Shape::attention_break_even` = `b` (prompt rows late in a prompt cost more of
    /// a step's budget: `scheduler::chunk_rows`).
    pub fn with_break_even(mut self, b: usize) -> Self {
        self.shape.attention_break_even = b;
        self
    }

    /// Makes forward call number `at` (0: the first) send on `entered`, then wait until
    /// `release` receives (or its sender drops).
    pub fn held(mut self, at: usize, entered: Sender<()>, release: Receiver<()>) -> Self {
        self.gate = Mutex::new(Some(Gate {
            at,
            entered,
            release,
        }));
        self
    }
}

impl Model for FakeModel {
    fn shape(&self) -> &Shape {
        &self.shape
    }

    fn forward_into(&self, kv: &mut KvSlab, rows: &[TokenRow], want: &[usize], out: &mut Vec<f32>) {
        let n = self.calls.lock().unwrap().len();
        let mut gate = self.gate.lock().unwrap();
        if gate.as_ref().is_some_and(|g| g.at == n) {
            let g = gate.take().expect("checked above");
            drop(gate);
            let _ = g.entered.send(());
            let _ = g.release.recv();
        } else {
            drop(gate);
        }
        self.calls.lock().unwrap().push(rows.to_vec());
        assert!(
            rows.iter().all(|r| r.token != PANIC_TOKEN),
            "the fake model was given its panic token"
        );
        for r in rows {
            let k = [r.token as f32; 16];
            kv.write(0, r.slot, r.pos, &k, &k);
        }
        let mut logits = vec![0f32; want.len() * VOCAB];
        for (j, &i) in want.iter().enumerate() {
            let r = rows[i];
            let from = if self.sums {
                // Value 0 of every position 0..=pos, through the table.
                let view = kv.read(0, r.slot, 0, r.pos + 1);
                (0..=r.pos)
                    .map(|p| {
                        let b = view.table[p / 16] as usize * view.block_stride;
                        view.values[b + (p % 16) * 16].to_f32() as u32
                    })
                    .sum()
            } else {
                r.token
            };
            let next = (from + self.step) as usize % VOCAB;
            logits[j * VOCAB + next] = 10.0;
        }
        *out = logits;
    }
}
