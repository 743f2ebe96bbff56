//! Every token as the bytes it stands for: what a grammar engine matches output against
//! (`constraint.rs`). Control tokens get llguidance's special-token form, a 0xFF byte then
//! their name, so no grammar over text can produce them by accident.

use std::collections::HashMap;

use super::spm::hex_byte;
use super::{Model, Tokenizer, gguf_vocab::kind};

/// GPT-2's byte-to-character map, inverted: the characters byte-level BPE vocabularies
/// spell bytes with.
fn byte_level_chars() -> HashMap<char, u8> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut map = HashMap::new();
    let mut next = 256u32;
    for b in 0..=255u32 {
        let c = if printable(b) {
            b
        } else {
            next += 1;
            next - 1
        };
        map.insert(char::from_u32(c).expect("a valid char"), b as u8);
    }
    map
}

/// A byte-level token's bytes; `None` if a character is outside the map.
fn from_byte_level(map: &HashMap<char, u8>, s: &str) -> Option<Vec<u8>> {
    s.chars().map(|c| map.get(&c).copied()).collect()
}

/// A SentencePiece-style piece's bytes: `▁` is a space, `<0xXX>` one byte.
fn from_piece(s: &str) -> Vec<u8> {
    match hex_byte(s) {
        Some(b) => vec![b],
        None => s.replace('\u{2581}', " ").into_bytes(),
    }
}

fn special(name: &str) -> Vec<u8> {
    let mut v = vec![0xFF];
    v.extend_from_slice(name.as_bytes());
    v
}

impl Tokenizer {
    /// The bytes of every id below `vocab_size` (ids the vocabulary lacks are empty).
    pub fn token_bytes(&self) -> Vec<Vec<u8>> {
        let n = self.vocab_size;
        let kind_of = |id: usize| self.types.get(id).copied().unwrap_or(kind::NORMAL);
        match &self.model {
            Model::Spm(spm) => (0..n)
                .map(|id| {
                    let Some(text) = spm.tokens.get(id) else {
                        return Vec::new();
                    };
                    match kind_of(id) {
                        kind::BYTE => spm.byte_of(id as u32).into_iter().collect(),
                        kind::NORMAL => text.replace('\u{2581}', " ").into_bytes(),
                        kind::USER_DEFINED => text.clone().into_bytes(),
                        _ => special(text),
                    }
                })
                .collect(),
            Model::Bpe(t) => {
                let map = byte_level_chars();
                (0..n)
                    .map(|id| {
                        let Some(text) = t.id_to_token(id as u32) else {
                            return Vec::new();
                        };
                        match kind_of(id) {
                            kind::NORMAL => from_byte_level(&map, &text)
                                .unwrap_or_else(|| text.clone().into_bytes()),
                            kind::USER_DEFINED => text.into_bytes(),
                            _ => special(&text),
                        }
                    })
                    .collect()
            }
            Model::Json(t) => {
                let map = byte_level_chars();
                let added = t.get_added_tokens_decoder();
                // Byte-level vocabularies spell a space `Ġ`; SentencePiece ones `▁`.
                let byte_level = t
                    .get_decoder()
                    .and_then(|d| serde_json::to_string(d).ok())
                    .is_some_and(|d| d.contains("ByteLevel"));
                (0..n)
                    .map(|id| {
                        let Some(text) = t.id_to_token(id as u32) else {
                            return Vec::new();
                        };
                        match added.get(&(id as u32)) {
                            Some(a) if a.special => special(&text),
                            Some(_) if byte_level => text.into_bytes(),
                            // Decoded like the rest of a SentencePiece vocabulary.
                            Some(_) => from_piece(&text),
                            None if byte_level => from_byte_level(&map, &text)
                                .unwrap_or_else(|| text.clone().into_bytes()),
                            None => from_piece(&text),
                        }
                    })
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_map_is_a_bijection() {
        let m = byte_level_chars();
        assert_eq!(m.len(), 256);
        assert_eq!(m[&'\u{120}'], b' ');
        assert_eq!(m[&'A'], b'A');
        assert_eq!(from_byte_level(&m, "\u{120}hi"), Some(b" hi".to_vec()));
    }

    #[test]
    fn pieces_spell_spaces_and_bytes() {
        assert_eq!(from_piece("\u{2581}the"), b" the");
        assert_eq!(from_piece("<0x0A>"), b"\n");
    }
}
