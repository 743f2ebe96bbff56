//! Tool calls out of a streamed answer: content is passed on as it comes, except text
//! that may be the start of a call marker, which waits until it is known; each call is
//! sent when it is complete, in OpenAI's delta shape (index, id and name first, then the
//! arguments).

use super::parse::{HERMES_CLOSE, HERMES_OPEN, ParsedCall, hermes_call, opener, parse};
use super::{CallReader, ToolFormat};

/// What one piece of output turns into.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Piece {
    /// Thinking to send now (`reasoning_content`), when the model thinks.
    pub reasoning: String,
    /// Content to send now.
    pub content: String,
    /// Calls completed now, with their index in the message (only the first call when
    /// the reader keeps one).
    pub calls: Vec<(usize, ParsedCall)>,
}

/// The per-choice state of a streamed answer with tools.
pub struct ToolStream {
    reader: CallReader,
    /// Whitespace after a call, sent only if content follows.
    pending: String,
    /// Text received and not yet sent or parsed.
    held: String,
    /// Inside a call (after its opening marker), or, for whole-answer formats, collecting
    /// the answer as calls.
    in_call: bool,
    /// Nothing but whitespace has been sent yet.
    at_start: bool,
    calls: usize,
}

/// Length of the longest suffix of `s` that is a proper prefix of `marker`.
fn partial_suffix(s: &str, marker: &str) -> usize {
    (1..marker.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.is_char_boundary(s.len() - k) && marker.starts_with(&s[s.len() - k..]))
        .unwrap_or(0)
}

impl ToolStream {
    /// A stream of one answer read by `reader`.
    pub fn new(reader: CallReader) -> Self {
        Self {
            reader,
            pending: String::new(),
            held: String::new(),
            in_call: false,
            at_start: true,
            calls: 0,
        }
    }

    /// Calls found so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Numbers the calls found, keeping only the first of the answer unless parallel.
    fn number(&mut self, calls: Vec<ParsedCall>) -> Vec<(usize, ParsedCall)> {
        let parallel = self.reader.parallel;
        calls
            .into_iter()
            .map(|c| {
                self.calls += 1;
                (self.calls - 1, c)
            })
            .filter(|(i, _)| parallel || *i == 0)
            .collect()
    }

    /// Takes the next piece of text.
    pub fn push(&mut self, text: &str) -> Piece {
        self.held.push_str(text);
        let mut out = Piece::default();
        loop {
            if self.in_call {
                if self.reader.format != ToolFormat::Hermes {
                    // Llama 3 and Mistral calls run to the end of the answer.
                    return out;
                }
                let Some(end) = self.held.find(HERMES_CLOSE) else {
                    return out;
                };
                let body = self.held[..end].to_string();
                self.held.drain(..end + HERMES_CLOSE.len());
                self.in_call = false;
                match hermes_call(&body, &self.reader.names) {
                    Some(c) => out.calls.extend(self.number(vec![c])),
                    // Not a call after all: its text is content.
                    None => out
                        .content
                        .push_str(&format!("{HERMES_OPEN}{body}{HERMES_CLOSE}")),
                }
                continue;
            }
            let marker = opener(self.reader.format);
            let trimmed = self.held.trim_start();
            if self.reader.format == ToolFormat::Llama3 {
                // A Llama 3 answer is calls only if it starts with one.
                if !self.at_start {
                    let all = std::mem::take(&mut self.held);
                    self.send(&mut out, &all);
                    return out;
                }
                if trimmed.starts_with('{') || trimmed.starts_with(marker) {
                    self.in_call = true;
                    continue;
                }
                if !marker.starts_with(trimmed) {
                    let all = std::mem::take(&mut self.held);
                    self.send(&mut out, &all);
                }
                // Else hold: whitespace, or the start of the marker.
                return out;
            }
            if let Some(at) = self.held.find(marker) {
                let before: String = self.held.drain(..at).collect();
                self.send(&mut out, &before);
                self.pending.clear();
                if self.reader.format == ToolFormat::Hermes {
                    self.held.drain(..marker.len());
                }
                self.in_call = true;
                continue;
            }
            // Hold back what may still become a marker.
            let keep = partial_suffix(&self.held, marker);
            let send: String = self.held.drain(..self.held.len() - keep).collect();
            self.send(&mut out, &send);
            return out;
        }
    }

    fn send(&mut self, out: &mut Piece, text: &str) {
        // Whitespace after a call waits: it is dropped if another call follows, sent if
        // content does. Content before any call is sent as is.
        if self.calls > 0 && text.trim().is_empty() {
            self.pending.push_str(text);
            return;
        }
        if !text.trim().is_empty() {
            self.at_start = false;
        }
        out.content.push_str(&std::mem::take(&mut self.pending));
        out.content.push_str(text);
    }

    /// The end of the answer: what is still held, as content or calls.
    pub fn finish(&mut self) -> Piece {
        let held = std::mem::take(&mut self.held);
        let mut out = Piece::default();
        if !self.in_call {
            self.send(&mut out, &held);
            return out;
        }
        self.in_call = false;
        let text = match self.reader.format {
            ToolFormat::Hermes => format!("{HERMES_OPEN}{held}"),
            _ => held,
        };
        let p = parse(self.reader.format, &text, &self.reader.names);
        if p.calls.is_empty() {
            out.content = text;
        } else {
            out.content = p.content;
            out.calls = self.number(p.calls);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `text` in pieces of `step` characters; returns the content and the calls.
    fn reader(format: ToolFormat) -> CallReader {
        CallReader {
            format,
            names: Vec::new(),
            parallel: true,
        }
    }

    fn run(format: ToolFormat, text: &str, step: usize) -> (String, Vec<(usize, ParsedCall)>) {
        let mut s = reader(format).stream();
        let chars: Vec<char> = text.chars().collect();
        let (mut content, mut calls) = (String::new(), Vec::new());
        for piece in chars.chunks(step) {
            let p = s.push(&piece.iter().collect::<String>());
            content.push_str(&p.content);
            calls.extend(p.calls);
        }
        let p = s.finish();
        content.push_str(&p.content);
        calls.extend(p.calls);
        (content, calls)
    }

    #[test]
    fn streamed_equals_whole_for_every_split() {
        let texts = [
            (
                ToolFormat::Hermes,
                "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n\
                 <tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
            ),
            (ToolFormat::Hermes, "No call here, just <tool text."),
            (
                ToolFormat::Hermes,
                "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n\
                 <tool_call>\n{\"name\": \"a\", \"argu",
            ),
            (
                ToolFormat::Llama3,
                "  {\"name\": \"a\", \"parameters\": {\"x\": \"y\"}}",
            ),
            (ToolFormat::Llama3, "Plain {answer}."),
            (
                ToolFormat::Llama3,
                "Sure. <|python_tag|>{\"name\": \"f\", \"parameters\": {}}",
            ),
            (
                ToolFormat::Hermes,
                "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n\
                 <tool_call>oops</tool_call>\nPara one.\n\nPara two.",
            ),
            (
                ToolFormat::Mistral,
                "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"k\": true}}]",
            ),
        ];
        for (f, t) in texts {
            let whole = parse(f, t, &[]);
            for step in [1, 2, 3, 7, 1000] {
                let (content, calls) = run(f, t, step);
                let calls: Vec<ParsedCall> = calls.into_iter().map(|(_, c)| c).collect();
                assert_eq!(calls, whole.calls, "{f:?} step {step}: {t}");
                assert_eq!(
                    content.trim(),
                    whole.content.trim(),
                    "{f:?} step {step}: {t}"
                );
            }
        }
    }

    #[test]
    fn content_before_a_call_is_not_held_longer_than_needed() {
        let mut s = reader(ToolFormat::Hermes).stream();
        assert_eq!(s.push("Hello <").content, "Hello ");
        assert_eq!(s.push("b>").content, "<b>");
    }

    #[test]
    fn calls_are_numbered_in_order() {
        let t = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\
                 <tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>";
        let (_, calls) = run(ToolFormat::Hermes, t, 5);
        assert_eq!(
            calls
                .iter()
                .map(|(i, c)| (*i, c.name.as_str()))
                .collect::<Vec<_>>(),
            vec![(0, "a"), (1, "b")]
        );
    }
}
