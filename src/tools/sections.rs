//! The part of an answer that holds calls, from its opening marker on, one reader per
//! family's layout. Each takes the text as it comes and reports each call as it goes: its
//! start once the function is known, its arguments piece by piece, its end.

use serde_json::Value;

use super::scan::{CallSoFar, Keys, Seen, call_object, literal, partial_suffix, space, value};
use super::{deepseek, xml};

/// What a reader finds, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A call to this function starts.
    Start(String),
    /// More of its arguments' JSON text.
    Args(String),
    /// It ends; `id` is the call's own id where the family writes one.
    End(Option<String>),
}

/// Where a section reader stands after the text it was given.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// It needs more text.
    More,
    /// The section ended; what follows it is given back.
    Done(String),
    /// It holds no call after all (only said before any call started): its text is
    /// content.
    Invalid,
}

/// What a section reader may check calls against.
pub struct Known<'a> {
    /// Functions that may be called (any when empty).
    pub names: &'a [String],
    /// Parameter schemas by function (for XML values).
    pub params: &'a dyn Fn(&str) -> Option<&'a Value>,
}

impl Known<'_> {
    pub fn allows(&self, name: &str) -> bool {
        self.names.is_empty() || self.names.iter().any(|n| n == name)
    }
}

/// A reader of one section.
pub trait Section {
    /// Takes more text; what it found goes to `out`.
    fn feed(&mut self, text: &str, k: &Known, out: &mut Vec<Found>) -> Step;
    /// The answer ended inside the section: a call under way ends as it is.
    fn finish(&mut self, out: &mut Vec<Found>) -> Step;
}

/// Streams the arguments value at `start` of `buf` (ending at `end` once whole), of which
/// `sent` bytes went out: its text as it comes, or a string value, once whole, decoded as
/// the JSON text it holds.
pub(super) fn stream_args(
    buf: &str,
    start: usize,
    end: Option<usize>,
    sent: &mut usize,
    out: &mut Vec<Found>,
) {
    let v = &buf[start..];
    if v.starts_with('"') {
        if let (Some(e), 0) = (end, *sent)
            && let Ok(s) = serde_json::from_str::<String>(&buf[start..e])
        {
            out.push(Found::Args(s));
            *sent = e - start;
        }
        return;
    }
    let upto = end.unwrap_or(buf.len()) - start;
    if upto > *sent {
        out.push(Found::Args(v[*sent..upto].to_string()));
        *sent = upto;
    }
}

/// A reader that meets text it cannot read: before any call its section is content
/// (`Invalid`), after one what is left of `buf` is (`Done`).
pub(super) fn give_up(any: bool, buf: &mut String) -> Step {
    if any {
        Step::Done(std::mem::take(buf))
    } else {
        Step::Invalid
    }
}

/// Where a JSON call section stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum J {
    /// Before the list's `[`.
    Lead,
    /// Before a call object.
    Item,
    /// Inside one.
    Call,
    /// After one: a separator, the list's end, or the section's end.
    After,
    /// Before a closing marker.
    Close,
}

/// Calls as JSON objects: one (Hermes), a list (Mistral, Granite, Command R7B), or several
/// separated by `;` (Llama 3).
pub struct JsonCalls {
    keys: Keys,
    list: bool,
    semicolons: bool,
    close: &'static [&'static str],
    state: J,
    buf: String,
    /// A call has started in this section.
    any: bool,
    /// The current call has started, and bytes of its arguments sent.
    started: bool,
    sent: usize,
}

impl JsonCalls {
    pub fn new(keys: Keys, list: bool, semicolons: bool, close: &'static [&'static str]) -> Self {
        Self {
            keys,
            list,
            semicolons,
            close,
            state: if list { J::Lead } else { J::Item },
            buf: String::new(),
            any: false,
            started: false,
            sent: 0,
        }
    }

    fn stop(&mut self) -> Step {
        give_up(self.any, &mut self.buf)
    }

    fn eat(&mut self, n: usize) {
        self.buf.drain(..n);
    }
}

impl Section for JsonCalls {
    fn feed(&mut self, text: &str, k: &Known, out: &mut Vec<Found>) -> Step {
        self.buf.push_str(text);
        loop {
            if self.state != J::Call {
                let n = space(&self.buf);
                self.eat(n);
                if self.buf.is_empty() {
                    return Step::More;
                }
            }
            let first = self.buf.as_bytes()[0];
            match self.state {
                J::Lead => match first {
                    b'[' => {
                        self.eat(1);
                        self.state = J::Item;
                    }
                    // A single call without its list.
                    b'{' => self.state = J::Item,
                    _ => return self.stop(),
                },
                J::Item => match first {
                    b'{' => {
                        self.state = J::Call;
                        self.started = false;
                        self.sent = 0;
                    }
                    b']' if self.list => {
                        self.eat(1);
                        self.state = J::Close;
                    }
                    _ => return self.stop(),
                },
                J::Call => {
                    let c: CallSoFar = call_object(&self.buf, self.keys);
                    if !self.started {
                        let args_ok = c.args.is_some_and(|(s, _)| {
                            matches!(self.buf.as_bytes().get(s), Some(b'{' | b'"'))
                        });
                        let ok_name = c.name.as_deref().map(|n| k.allows(n));
                        if c.bad || ok_name == Some(false) || (c.end.is_some() && !args_ok) {
                            return self.stop();
                        }
                        if ok_name != Some(true) || !args_ok {
                            return Step::More;
                        }
                        out.push(Found::Start(c.name.clone().unwrap_or_default()));
                        self.started = true;
                        self.any = true;
                    }
                    if let Some((s, e)) = c.args {
                        stream_args(&self.buf, s, e, &mut self.sent, out);
                    }
                    let end = match (c.end, c.bad) {
                        (Some(end), _) => end,
                        // Broken after it started: it ends here; the rest is dropped.
                        (None, true) => self.buf.len(),
                        (None, false) => return Step::More,
                    };
                    out.push(Found::End(c.id));
                    self.started = false;
                    self.eat(end);
                    self.state = J::After;
                }
                J::After => match first {
                    b',' if self.list => {
                        self.eat(1);
                        self.state = J::Item;
                    }
                    b']' if self.list => {
                        self.eat(1);
                        self.state = J::Close;
                    }
                    b';' if self.semicolons => {
                        self.eat(1);
                        self.state = J::Item;
                    }
                    b'{' if self.semicolons => self.state = J::Item,
                    _ if self.list => return self.stop(),
                    _ => self.state = J::Close,
                },
                J::Close => {
                    for m in self.close {
                        match literal(&self.buf, m) {
                            Seen::Whole(n) => {
                                self.eat(n);
                                return Step::Done(std::mem::take(&mut self.buf));
                            }
                            Seen::Partial => return Step::More,
                            Seen::No => {}
                        }
                    }
                    return Step::Done(std::mem::take(&mut self.buf));
                }
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<Found>) -> Step {
        if self.started {
            out.push(Found::End(None));
            self.started = false;
            return Step::Done(String::new());
        }
        match self.state {
            J::Close | J::After => Step::Done(std::mem::take(&mut self.buf)),
            _ => self.stop(),
        }
    }
}

/// Text up to a marker: `Whole(n)` when the marker starts at `n`, else how much may be
/// taken without cutting a partial marker.
fn until(buf: &str, marker: &str) -> Result<usize, usize> {
    match buf.find(marker) {
        Some(at) => Ok(at),
        None => Err(buf.len() - partial_suffix(buf, marker)),
    }
}

/// Mistral Small 3.2 / Devstral / Ministral: `[TOOL_CALLS]name[ARGS]{…}`, or
/// `[TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`; one call per marker.
pub struct MistralArgs {
    buf: String,
    name: Option<String>,
    id: Option<String>,
    /// In the arguments: bytes sent.
    args: Option<usize>,
}

const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

impl MistralArgs {
    pub fn new() -> Self {
        Self {
            buf: String::new(),
            name: None,
            id: None,
            args: None,
        }
    }
}

impl Section for MistralArgs {
    fn feed(&mut self, text: &str, k: &Known, out: &mut Vec<Found>) -> Step {
        self.buf.push_str(text);
        loop {
            if let Some(sent) = &mut self.args {
                let seen = value(&self.buf);
                let end = match seen {
                    Seen::Whole(n) => Some(n),
                    Seen::Partial => None,
                    Seen::No => Some(0),
                };
                stream_args(&self.buf, 0, end, sent, out);
                let Some(end) = end else {
                    return Step::More;
                };
                out.push(Found::End(self.id.take()));
                return Step::Done(self.buf.split_off(end));
            }
            if self.name.is_none() {
                let (a, c) = (until(&self.buf, ARGS), until(&self.buf, CALL_ID));
                let (at, marker) = match (a, c) {
                    (Ok(a), Ok(c)) if c < a => (c, CALL_ID),
                    (Ok(a), _) => (a, ARGS),
                    (_, Ok(c)) => (c, CALL_ID),
                    _ => return Step::More,
                };
                let name = self.buf[..at].trim().to_string();
                if name.is_empty() || !k.allows(&name) || name.contains(char::is_whitespace) {
                    return Step::Invalid;
                }
                self.buf.drain(..at + marker.len());
                self.name = Some(name);
                if marker == ARGS {
                    self.start(out);
                }
                continue;
            }
            // After `[CALL_ID]`: the id, up to `[ARGS]`.
            let Ok(at) = until(&self.buf, ARGS) else {
                return Step::More;
            };
            self.id = Some(self.buf[..at].trim().to_string());
            self.buf.drain(..at + ARGS.len());
            self.start(out);
        }
    }

    fn finish(&mut self, out: &mut Vec<Found>) -> Step {
        if self.args.is_some() {
            out.push(Found::End(self.id.take()));
            Step::Done(String::new())
        } else {
            Step::Invalid
        }
    }
}

impl MistralArgs {
    fn start(&mut self, out: &mut Vec<Found>) {
        let n = space(&self.buf);
        self.buf.drain(..n);
        out.push(Found::Start(self.name.clone().unwrap_or_default()));
        self.args = Some(0);
    }
}

/// Command R7B's answer markers, taken out of the content.
pub struct Nothing;

impl Section for Nothing {
    fn feed(&mut self, text: &str, _: &Known, _: &mut Vec<Found>) -> Step {
        Step::Done(text.to_string())
    }

    fn finish(&mut self, _: &mut Vec<Found>) -> Step {
        Step::Done(String::new())
    }
}

pub use deepseek::DeepSeek;
pub use xml::QwenXml;
