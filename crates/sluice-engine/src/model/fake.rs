//! A tiny deterministic model for unit tests of the engine loop: no file, no weights.
//! Greedy decoding from token `t` always gives `(t + step) % vocab`; it records every
//! forward call, can hold its first call until the test releases it (so that a test can
//! queue requests deterministically), and panics on [`PANIC_TOKEN`].

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
            calls: Arc::default(),
            gate: Mutex::new(None),
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
            let next = (rows[i].token + self.step) as usize % VOCAB;
            logits[j * VOCAB + next] = 10.0;
        }
        *out = logits;
    }
}
