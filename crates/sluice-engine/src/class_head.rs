//! A model file's classification head (docs/ARCHITECTURE.md, "Embeddings"): the tensors
//! llama.cpp's converter writes for a sequence classifier or reranker (`cls.weight` and
//! `cls.bias`, a dense layer with tanh, optional; `cls.output.weight` and
//! `cls.output.bias`, the projection onto the labels), applied to the last position's
//! final hidden state. Its scores are probabilities: a sigmoid of a single output, else
//! a softmax over the labels.

use sluice_kernels::QLinear;

use crate::error::ModelError;
use crate::gguf::GgufFile;
use crate::model::tensors;

/// How a reranker's query and document become one prompt when the file has no
/// `tokenizer.chat_template.rerank`: llama.cpp's layout for a pair, `[BOS] query [EOS]
/// [SEP] document [EOS]`, each special token only where the vocabulary adds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PairFormat {
    /// BOS first, when the vocabulary adds it.
    pub bos: Option<u32>,
    /// EOS after each text, when the vocabulary adds it.
    pub eos: Option<u32>,
    /// SEP between them, when the vocabulary adds it.
    pub sep: Option<u32>,
}

impl PairFormat {
    /// The ids of a pair, from each text's own ids (no special tokens added).
    pub fn join(&self, query: &[u32], document: &[u32]) -> Vec<u32> {
        let mut out = Vec::with_capacity(query.len() + document.len() + 4);
        out.extend(self.bos);
        out.extend_from_slice(query);
        out.extend(self.eos);
        out.extend(self.sep);
        out.extend_from_slice(document);
        out.extend(self.eos);
        out
    }
}

/// The head: `labels x hidden` after an optional `hidden x hidden` dense layer with tanh.
pub struct ClassHead {
    dense: Option<(QLinear, Option<Vec<f32>>)>,
    out: QLinear,
    out_bias: Option<Vec<f32>>,
    hidden: usize,
    /// The labels' names (`{arch}.classifier.output_labels`), when the file gives them.
    pub labels: Vec<String>,
    /// The file's prompt for a query and a document (`{query}`, `{document}`), if any.
    pub template: Option<String>,
    /// The prompt layout without a template.
    pub pair: PairFormat,
}

impl std::fmt::Debug for ClassHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClassHead")
            .field("dense", &self.dense.is_some())
            .field("labels", &self.labels)
            .field("hidden", &self.hidden)
            .finish()
    }
}

impl ClassHead {
    /// The head of `file`, if it has one.
    pub fn of_file(file: &GgufFile) -> Result<Option<Self>, ModelError> {
        if !file.has_tensor("cls.output.weight") {
            return Ok(None);
        }
        // The hidden size: the width of the token embeddings.
        let hidden = match file.tensor("token_embd.weight")?.1.as_slice() {
            [_, h] => *h,
            d => {
                return Err(ModelError::Shape {
                    name: "token_embd.weight".into(),
                    found: d.to_vec(),
                    expected: vec![0, 0],
                });
            }
        };
        let (_, dims, _) = file.tensor("cls.output.weight")?;
        let n = match dims.as_slice() {
            [n, h] if *h == hidden && (1..=4096).contains(n) => *n,
            _ => {
                return Err(ModelError::Shape {
                    name: "cls.output.weight".into(),
                    found: dims,
                    expected: vec![1, hidden],
                });
            }
        };
        let optional = |name: &str, len: usize| match file.has_tensor(name) {
            true => tensors::vector(file, name, len).map(Some),
            false => Ok(None),
        };
        let dense = match file.has_tensor("cls.weight") {
            true => Some((
                tensors::matrix(file, "cls.weight", hidden, hidden)?,
                optional("cls.bias", hidden)?,
            )),
            false => None,
        };
        let arch = file.get_str("general.architecture").unwrap_or_default();
        let labels = match file.get(&format!("{arch}.classifier.output_labels")) {
            Ok(v) => v
                .to_vec()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.to_string().ok().cloned())
                        .collect()
                })
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let id = |key: &str| file.get_u64(key).ok().map(|v| v as u32);
        let adds = |key: &str, default: bool| file.get_bool(key).unwrap_or(default);
        let pair = PairFormat {
            bos: id("tokenizer.ggml.bos_token_id")
                .filter(|_| adds("tokenizer.ggml.add_bos_token", false)),
            eos: id("tokenizer.ggml.eos_token_id")
                .filter(|_| adds("tokenizer.ggml.add_eos_token", false)),
            sep: id("tokenizer.ggml.seperator_token_id")
                .filter(|_| adds("tokenizer.ggml.add_sep_token", false)),
        };
        Ok(Some(Self {
            dense,
            out: tensors::matrix(file, "cls.output.weight", n, hidden)?,
            out_bias: optional("cls.output.bias", n)?,
            hidden,
            labels,
            template: file
                .get_str("tokenizer.chat_template.rerank")
                .ok()
                .map(str::to_string),
            pair,
        }))
    }

    /// The head's raw outputs (one per label) for a final hidden state; NaNs for a state
    /// of the wrong size.
    pub fn apply(&self, h: &[f32]) -> Vec<f32> {
        let n = self.out.rows;
        if h.len() != self.hidden {
            return vec![f32::NAN; n];
        }
        let mut x = h.to_vec();
        if let Some((w, b)) = &self.dense {
            let mut y = vec![0.0; self.hidden];
            w.matmul(&x, 1, &mut y);
            for (i, v) in y.iter_mut().enumerate() {
                *v = (*v + b.as_ref().map_or(0.0, |b| b[i])).tanh();
            }
            x = y;
        }
        let mut y = vec![0.0; n];
        self.out.matmul(&x, 1, &mut y);
        if let Some(b) = &self.out_bias {
            for (v, b) in y.iter_mut().zip(b) {
                *v += b;
            }
        }
        y
    }

    /// The relevance of raw outputs: the sigmoid of a single output; else the softmax
    /// probability of the label named `yes` (of the first label when none is).
    pub fn score(&self, outputs: &[f32]) -> f64 {
        score(outputs, &self.labels)
    }
}

fn score(outputs: &[f32], labels: &[String]) -> f64 {
    match outputs {
        [] => f64::NAN,
        [x] => 1.0 / (1.0 + (-(*x as f64)).exp()),
        _ => {
            let k = labels.iter().position(|l| l == "yes").unwrap_or(0);
            let max = outputs.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
            let sum: f64 = outputs.iter().map(|&x| (x as f64 - max).exp()).sum();
            outputs
                .get(k)
                .map_or(f64::NAN, |&x| (x as f64 - max).exp() / sum)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_output_is_a_sigmoid() {
        assert_eq!(score(&[0.0], &[]), 0.5);
        assert!((score(&[2.0], &[]) - 0.880_797).abs() < 1e-6);
        assert!(score(&[], &[]).is_nan());
    }

    #[test]
    fn several_outputs_are_a_softmax_of_yes() {
        let p = score(&[1.0, 3.0], &[]);
        assert!(
            (p - 1.0 / (1.0 + 2f64.exp())).abs() < 1e-9,
            "first label: {p}"
        );
        let labels = vec!["no".to_string(), "yes".to_string()];
        let p = score(&[1.0, 3.0], &labels);
        assert!(
            (p - 1.0 / (1.0 + (-2f64).exp())).abs() < 1e-9,
            "the `yes` label: {p}"
        );
        // Large logits do not overflow.
        assert!((score(&[1000.0, 0.0], &[]) - 1.0).abs() < 1e-12);
    }

    fn f32_matrix(values: &[f32], rows: usize, cols: usize) -> QLinear {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        QLinear::new(candle_core::quantized::GgmlDType::F32, &bytes, rows, cols).unwrap()
    }

    #[test]
    fn the_dense_layer_and_biases_are_applied_in_order() {
        // h = [1, 2]; dense = [[1, 0], [1, 1]] + [0.5, -3] -> tanh([1.5, 0]);
        // out = [[2, 1]] + [0.25] -> 2 tanh(1.5) + 0.25.
        let head = ClassHead {
            dense: Some((
                f32_matrix(&[1.0, 0.0, 1.0, 1.0], 2, 2),
                Some(vec![0.5, -3.0]),
            )),
            out: f32_matrix(&[2.0, 1.0], 1, 2),
            out_bias: Some(vec![0.25]),
            hidden: 2,
            labels: Vec::new(),
            template: None,
            pair: PairFormat::default(),
        };
        let y = head.apply(&[1.0, 2.0]);
        assert_eq!(y.len(), 1);
        assert!((y[0] - (2.0 * 1.5f32.tanh() + 0.25)).abs() < 1e-5, "{y:?}");
        assert!(
            head.apply(&[1.0]).iter().all(|v| v.is_nan()),
            "a wrong size is NaN"
        );
    }

    #[test]
    fn a_pair_is_laid_out_as_llama_cpp_lays_it() {
        let f = PairFormat {
            bos: Some(1),
            eos: Some(2),
            sep: Some(3),
        };
        assert_eq!(f.join(&[10, 11], &[20]), vec![1, 10, 11, 2, 3, 20, 2]);
        assert_eq!(PairFormat::default().join(&[10], &[20]), vec![10, 20]);
    }
}
