//! Incremental detokenisation that only ever emits complete UTF-8 text
//! (docs/ARCHITECTURE.md, "Detokenisation").
//!
//! The decoder keeps a window of recent ids and re-decodes it, emitting the new suffix
//! only once it no longer ends in a replacement character (a multi-byte character split
//! across tokens). This is the prefix/read-offset scheme of TGI and vLLM.

use super::Tokenizer;

/// Turns a stream of ids into a stream of text deltas whose concatenation is the text.
#[derive(Clone, Debug, Default)]
pub struct IncrementalDecoder {
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl IncrementalDecoder {
    /// Adds one id and returns the text that became complete, possibly empty.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        self.ids.push(id);
        let before = tok
            .decode(&self.ids[self.prefix..self.read])
            .unwrap_or_default();
        let now = tok.decode(&self.ids[self.prefix..]).unwrap_or_default();
        if now.len() > before.len()
            && !now.ends_with('\u{FFFD}')
            && now.is_char_boundary(before.len())
        {
            let delta = now[before.len()..].to_string();
            self.prefix = self.read;
            self.read = self.ids.len();
            // Keep the window small: only the ids after `prefix` are ever decoded again.
            if self.prefix > 0 {
                self.ids.drain(..self.prefix);
                self.read -= self.prefix;
                self.prefix = 0;
            }
            delta
        } else {
            String::new()
        }
    }

    /// Text still held back at the end of the stream (an incomplete character is
    /// emitted as U+FFFD, as a non-streaming decode of the same ids shows it).
    pub fn finish(&mut self, tok: &Tokenizer) -> String {
        let before = tok
            .decode(&self.ids[self.prefix..self.read])
            .unwrap_or_default();
        let now = tok.decode(&self.ids[self.prefix..]).unwrap_or_default();
        self.ids.clear();
        self.prefix = 0;
        self.read = 0;
        match now.get(before.len()..) {
            Some(rest) if now.starts_with(&before) => rest.to_string(),
            _ => String::new(),
        }
    }
}
