//! SentencePiece-style BPE over a scored vocabulary (`tokenizer.ggml.model = llama`), as
//! llama.cpp runs it: the text is split into UTF-8 characters, then the adjacent pair whose
//! concatenation is the highest-scoring token is merged, repeatedly (ties: leftmost
//! first); characters that never become a token are written as their `<0xXX>` byte
//! tokens (docs/ARCHITECTURE.md, "Tokenisers").

use std::collections::{BinaryHeap, HashMap};

/// A scored vocabulary with byte fallback.
pub struct Spm {
    /// Token texts (`▁` for a space), by id.
    pub tokens: Vec<String>,
    scores: Vec<f32>,
    to_id: HashMap<String, u32>,
    bytes: [Option<u32>; 256],
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge; the heap pops the highest score, then the leftmost.
#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

/// The byte a `<0xXX>` piece stands for.
pub(super) fn hex_byte(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok())?
}

impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

impl Spm {
    /// The vocabulary; `to_id` keeps the last id of a duplicated text, as llama.cpp does.
    pub fn new(tokens: Vec<String>, scores: Vec<f32>) -> Self {
        let mut to_id = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            to_id.insert(t.clone(), i as u32);
        }
        let mut bytes = [None; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            *slot = to_id
                .get(&format!("<0x{b:02X}>"))
                .or_else(|| {
                    char::from_u32(b as u32)
                        .filter(|_| b < 128)
                        .and_then(|c| to_id.get(&c.to_string()))
                })
                .copied();
        }
        Self {
            tokens,
            scores,
            to_id,
            bytes,
        }
    }

    /// The id of a token text.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.to_id.get(text).copied()
    }

    /// The byte a `<0xXX>` token stands for.
    pub fn byte_of(&self, id: u32) -> Option<u8> {
        hex_byte(self.tokens.get(id as usize)?)
    }

    /// Appends the tokens of `text` (spaces already written as `▁`).
    pub fn tokenize(&self, text: &str, out: &mut Vec<u32>) {
        let mut syms: Vec<Symbol> = Vec::new();
        for (i, (start, c)) in text.char_indices().enumerate() {
            syms.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: None,
            });
            if i > 0 {
                syms[i - 1].next = Some(i);
            }
        }
        let mut heap = BinaryHeap::new();
        let try_add =
            |syms: &[Symbol], heap: &mut BinaryHeap<Bigram>, l: Option<usize>, r: Option<usize>| {
                let (Some(l), Some(r)) = (l, r) else { return };
                let (a, b) = (syms[l], syms[r]);
                let piece = &text[a.start..a.start + a.len + b.len];
                if let Some(&id) = self.to_id.get(piece) {
                    heap.push(Bigram {
                        score: self.scores.get(id as usize).copied().unwrap_or(0.0),
                        left: l,
                        right: r,
                        size: piece.len(),
                    });
                }
            };
        for i in 1..syms.len() {
            try_add(&syms, &mut heap, Some(i - 1), Some(i));
        }
        while let Some(bg) = heap.pop() {
            let (l, r) = (syms[bg.left], syms[bg.right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != bg.size {
                continue;
            }
            syms[bg.left].len += r.len;
            syms[bg.right].len = 0;
            syms[bg.left].next = r.next;
            if let Some(n) = r.next {
                syms[n].prev = Some(bg.left);
            }
            try_add(&syms, &mut heap, syms[bg.left].prev, Some(bg.left));
            try_add(&syms, &mut heap, Some(bg.left), syms[bg.left].next);
        }
        let mut i = (!syms.is_empty()).then_some(0);
        while let Some(k) = i {
            let s = syms[k];
            let piece = &text[s.start..s.start + s.len];
            match self.to_id.get(piece) {
                Some(&id) => out.push(id),
                None => out.extend(piece.bytes().filter_map(|b| self.bytes[b as usize])),
            }
            i = s.next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_by_score_and_falls_back_to_bytes() {
        let toks = [
            "<unk>", "a", "b", "c", "ab", "bc", "abc", "<0xC3>", "<0xA9>",
        ];
        let scores = [0.0, -1.0, -1.0, -1.0, -3.0, -2.0, -2.5, 0.0, 0.0];
        let spm = Spm::new(
            toks.iter().map(|s| s.to_string()).collect(),
            scores.to_vec(),
        );
        let mut out = Vec::new();
        // "bc" outscores "ab", then a + bc makes "abc".
        spm.tokenize("abc", &mut out);
        assert_eq!(out, [6]);
        out.clear();
        spm.tokenize("abcb", &mut out);
        assert_eq!(out, [6, 2]);
        out.clear();
        spm.tokenize("é", &mut out);
        assert_eq!(out, [7, 8]);
        assert_eq!(spm.byte_of(7), Some(0xC3));
    }
}
