//! Tool calls out of a streamed answer: content is passed on as it comes, except text
//! that may be the start of a call marker, which waits until it is known; each call goes
//! out as it is written, in OpenAI's delta shape: its index and function first, then its
//! arguments piece by piece.

use super::CallReader;
use super::scan::{Seen, literal, partial_suffix};
use super::sections::{Found, Known, Section, Step};

/// A piece of one call: its start (`name` set), or more of its arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallDelta {
    /// The call's index in the message.
    pub index: usize,
    /// The function, on the call's first delta.
    pub name: Option<String>,
    /// More of its arguments' JSON text.
    pub arguments: String,
    /// The call's own id, where the family writes one (on its last delta).
    pub id: Option<String>,
    /// The call is complete (its last delta).
    pub done: bool,
}

/// What one piece of output turns into.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Piece {
    /// Thinking to send now (`reasoning_content`), when the model thinks.
    pub reasoning: String,
    /// Content to send now.
    pub content: String,
    /// Pieces of calls (only the first call's when the reader keeps one).
    pub calls: Vec<CallDelta>,
}

/// A section of calls being read, with its text so far while no call has started (it
/// is content if none does).
struct Open {
    reader: Box<dyn Section + Send>,
    raw: String,
    /// Bytes of `raw` that are the opening marker.
    marker: usize,
    started: bool,
}

/// The per-choice state of a streamed answer with tools.
pub struct ToolStream {
    reader: CallReader,
    held: String,
    section: Option<Open>,
    /// Whitespace that is sent only if content follows.
    space: String,
    /// Nothing but whitespace has been seen (Llama 3's calls are the whole answer).
    at_start: bool,
    /// The last thing out was a call (whitespace after it is dropped).
    after_call: bool,
    calls: usize,
}

impl ToolStream {
    /// A stream of one answer read by `reader`.
    pub fn new(reader: CallReader) -> Self {
        Self {
            reader,
            held: String::new(),
            section: None,
            space: String::new(),
            at_start: true,
            after_call: false,
            calls: 0,
        }
    }

    /// Calls found so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Takes the next piece of text.
    pub fn push(&mut self, text: &str) -> Piece {
        let mut out = Piece::default();
        self.held.push_str(text);
        self.run(&mut out, false);
        out
    }

    /// The end of the answer: what is still held, as content or calls.
    pub fn finish(&mut self) -> Piece {
        let mut out = Piece::default();
        self.run(&mut out, true);
        if self.calls == 0 && !self.after_call {
            out.content.push_str(&std::mem::take(&mut self.space));
        }
        out
    }

    fn run(&mut self, out: &mut Piece, end: bool) {
        loop {
            if let Some(open) = &mut self.section {
                let text = std::mem::take(&mut self.held);
                if !open.started {
                    open.raw.push_str(&text);
                }
                let mut found = Vec::new();
                let params = |n: &str| self.reader.params.get(n);
                let known = Known {
                    names: &self.reader.names,
                    params: &params,
                };
                let step = if end && text.is_empty() {
                    open.reader.finish(&mut found)
                } else {
                    match open.reader.feed(&text, &known, &mut found) {
                        Step::More if end => open.reader.finish(&mut found),
                        s => s,
                    }
                };
                open.started |= found.iter().any(|f| matches!(f, Found::Start(_)));
                for f in found {
                    self.take(f, out);
                }
                match step {
                    Step::More => return,
                    Step::Done(rest) => {
                        self.section = None;
                        self.held = rest;
                    }
                    Step::Invalid => {
                        // Not calls after all: the marker is content, and what followed
                        // it is read again.
                        let open = self.section.take().expect("a section is open");
                        self.content(&open.raw[..open.marker], out);
                        self.held = open.raw[open.marker..].to_string();
                    }
                }
                continue;
            }
            if self.held.is_empty() {
                return;
            }
            if !self.find_opener(out, end) {
                return;
            }
        }
    }

    /// Sends the held text up to the first opening marker and opens its section; sends
    /// what cannot start a marker and returns false when there is none.
    fn find_opener(&mut self, out: &mut Piece, end: bool) -> bool {
        let format = self.reader.format;
        let first = format
            .openers()
            .iter()
            .filter_map(|o| self.held.find(o.text).map(|at| (at, o)))
            .min_by_key(|(at, _)| *at);
        // Llama 3's bare JSON call is the whole answer: only at its start.
        let trimmed = self.held.trim_start();
        if format == super::ToolFormat::Llama3 && self.at_start && trimmed.starts_with('{') {
            let lead = self.held.len() - trimmed.len();
            self.held.drain(..lead);
            self.open(0, false);
            return true;
        }
        if let Some((at, o)) = first {
            // A longer marker that starts the same way may still be coming.
            let longer = format.openers().iter().any(|p| {
                p.text.len() > o.text.len()
                    && p.text.starts_with(o.text)
                    && literal(&self.held[at..], p.text) == Seen::Partial
            });
            if longer && !end {
                let before: String = self.held.drain(..at).collect();
                self.content(&before, out);
                return false;
            }
            let before: String = self.held.drain(..at).collect();
            self.content(&before, out);
            self.open(o.text.len(), o.eaten);
            return true;
        }
        let keep = if end {
            0
        } else {
            format
                .openers()
                .iter()
                .map(|o| partial_suffix(&self.held, o.text))
                .max()
                .unwrap_or(0)
        };
        let send: String = self.held.drain(..self.held.len() - keep).collect();
        self.content(&send, out);
        false
    }

    /// Opens a section at the start of `held`, whose first `len` bytes are its marker:
    /// taken from the text when `eaten`, else read by the section (if the section turns
    /// out to hold no call, its first character is content and the rest is read again).
    fn open(&mut self, len: usize, eaten: bool) {
        let opener = self.held[..len].to_string();
        let (raw, marker) = if eaten {
            self.held.drain(..len);
            (opener.clone(), len)
        } else {
            let first = self.held.chars().next().map_or(0, char::len_utf8);
            (String::new(), first)
        };
        self.section = Some(Open {
            reader: self.reader.format.section(&opener),
            raw,
            marker,
            started: false,
        });
    }

    /// Content: whitespace waits until text follows it (and is dropped before and after
    /// calls).
    fn content(&mut self, text: &str, out: &mut Piece) {
        if text.is_empty() {
            return;
        }
        let body = text.trim_end();
        if body.is_empty() {
            self.space.push_str(text);
            return;
        }
        self.at_start = false;
        let lead = std::mem::take(&mut self.space);
        if !self.after_call {
            out.content.push_str(&lead);
        }
        let body = if self.after_call {
            body.trim_start()
        } else {
            body
        };
        out.content.push_str(body);
        self.after_call = false;
        self.space.push_str(&text[text.trim_end().len()..]);
    }

    /// One thing a section found.
    fn take(&mut self, f: Found, out: &mut Piece) {
        let keep = self.reader.parallel || self.calls <= 1;
        match f {
            Found::Start(name) => {
                self.space.clear();
                self.at_start = false;
                self.calls += 1;
                if self.reader.parallel || self.calls == 1 {
                    out.calls.push(CallDelta {
                        index: self.calls - 1,
                        name: Some(name),
                        ..CallDelta::default()
                    });
                }
            }
            Found::Args(a) if keep => match out.calls.last_mut() {
                Some(d) if d.index == self.calls - 1 => d.arguments.push_str(&a),
                _ => out.calls.push(CallDelta {
                    index: self.calls - 1,
                    arguments: a,
                    ..CallDelta::default()
                }),
            },
            Found::End(id) if keep => {
                self.after_call = true;
                match out.calls.last_mut().filter(|d| d.index == self.calls - 1) {
                    Some(d) => {
                        d.id = id;
                        d.done = true;
                    }
                    None => out.calls.push(CallDelta {
                        index: self.calls - 1,
                        id,
                        done: true,
                        ..CallDelta::default()
                    }),
                }
            }
            Found::End(_) => self.after_call = true,
            Found::Args(_) => {}
        }
    }
}
