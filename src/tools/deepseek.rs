//! DeepSeek R1's calls (and its distills').

use super::scan::{Seen, literal, space, value};
use super::sections::{Found, Known, Section, Step, give_up, stream_args};

/// DeepSeek R1: `<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function
/// <｜tool▁sep｜>name` newline, the arguments in a ```` ```json ```` fence,
/// `<｜tool▁call▁end｜>`; then `<｜tool▁calls▁end｜>`.
pub struct DeepSeek {
    buf: String,
    state: D,
    any: bool,
    sent: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum D {
    Begin,
    Name,
    Args,
    CallEnd,
}

const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const SEP: &str = "<｜tool▁sep｜>";
const CALL_END: &str = "<｜tool▁call▁end｜>";
const CALLS_END: &str = "<｜tool▁calls▁end｜>";

impl DeepSeek {
    pub fn new() -> Self {
        Self {
            buf: String::new(),
            state: D::Begin,
            any: false,
            sent: 0,
        }
    }

    fn stop(&mut self) -> Step {
        give_up(self.any, &mut self.buf)
    }
}

impl Section for DeepSeek {
    fn feed(&mut self, text: &str, k: &Known, out: &mut Vec<Found>) -> Step {
        self.buf.push_str(text);
        loop {
            match self.state {
                D::Begin => {
                    let n = space(&self.buf);
                    self.buf.drain(..n);
                    // `<｜tool▁calls｜>function<｜tool▁sep｜>…`: a call without its own
                    // opening marker.
                    if !self.any {
                        match literal(&self.buf, "function") {
                            Seen::Whole(_) => {
                                self.state = D::Name;
                                continue;
                            }
                            Seen::Partial => return Step::More,
                            Seen::No => {}
                        }
                    }
                    match (
                        literal(&self.buf, CALL_BEGIN),
                        literal(&self.buf, CALLS_END),
                    ) {
                        (Seen::Whole(n), _) => {
                            self.buf.drain(..n);
                            self.state = D::Name;
                        }
                        (_, Seen::Whole(n)) => return Step::Done(self.buf.split_off(n)),
                        (Seen::Partial, _) | (_, Seen::Partial) => return Step::More,
                        _ => return self.stop(),
                    }
                }
                D::Name => {
                    let Some(nl) = self.buf.find('\n') else {
                        return Step::More;
                    };
                    let head = &self.buf[..nl];
                    let name = head
                        .rsplit(SEP)
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                    if !head.contains(SEP) || name.is_empty() || !k.allows(&name) {
                        return self.stop();
                    }
                    self.buf.drain(..nl + 1);
                    out.push(Found::Start(name));
                    self.any = true;
                    self.sent = 0;
                    self.state = D::Args;
                }
                D::Args => {
                    let n = space(&self.buf);
                    let rest = &self.buf[n..];
                    match literal(rest, "```json") {
                        Seen::Whole(f) => {
                            self.buf.drain(..n + f);
                            continue;
                        }
                        Seen::Partial => return Step::More,
                        Seen::No => {}
                    }
                    self.buf.drain(..n);
                    let end = match value(&self.buf) {
                        Seen::Whole(e) => Some(e),
                        Seen::Partial => None,
                        Seen::No => Some(0),
                    };
                    stream_args(&self.buf, 0, end, &mut self.sent, out);
                    let Some(e) = end else {
                        return Step::More;
                    };
                    self.buf.drain(..e);
                    out.push(Found::End(None));
                    self.state = D::CallEnd;
                }
                D::CallEnd => {
                    let n = space(&self.buf);
                    let rest = &self.buf[n..];
                    let fence = match literal(rest, "```") {
                        Seen::Whole(f) => f,
                        Seen::Partial => return Step::More,
                        Seen::No => 0,
                    };
                    let n2 = n + fence + space(&rest[fence..]);
                    match literal(&self.buf[n2..], CALL_END) {
                        Seen::Whole(e) => {
                            self.buf.drain(..n2 + e);
                            self.state = D::Begin;
                        }
                        Seen::Partial => return Step::More,
                        Seen::No => return Step::Done(self.buf.split_off(n2)),
                    }
                }
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<Found>) -> Step {
        match self.state {
            D::Args => {
                out.push(Found::End(None));
                Step::Done(String::new())
            }
            D::CallEnd => Step::Done(String::new()),
            _ => self.stop(),
        }
    }
}
