//! Other ways models write calls than their template teaches, as llama.cpp's parsers
//! accept them: Hermes-style models' `<function=name>{…}</function>`, a call in a fenced
//! block, and Llama 3.1's built-in tools (`<|python_tag|>name.call(key="value")`).

use serde_json::{Map, Value};

use super::scan::{PLAIN, Seen, literal, space, value};
use super::sections::{Found, JsonCalls, Known, Section, Step};

/// `<function=NAME>` or `<function name="NAME">`, then the arguments as JSON, then
/// `</function>` (the opening `<function` is taken before).
pub struct FunctionTag {
    buf: String,
    name: Option<String>,
    sent: Option<usize>,
    done: bool,
}

impl FunctionTag {
    pub fn new() -> Self {
        Self {
            buf: String::new(),
            name: None,
            sent: None,
            done: false,
        }
    }
}

impl Section for FunctionTag {
    fn feed(&mut self, text: &str, k: &Known, out: &mut Vec<Found>) -> Step {
        self.buf.push_str(text);
        if self.name.is_none() {
            let Some(gt) = self.buf.find('>') else {
                return if self.buf.contains('\n') {
                    Step::Invalid
                } else {
                    Step::More
                };
            };
            let head = self.buf[..gt].trim();
            let name = head
                .strip_prefix('=')
                .or_else(|| head.strip_prefix("name="))
                .unwrap_or("")
                .trim_matches('"')
                .to_string();
            let n = gt + 1 + space(&self.buf[gt + 1..]);
            match self.buf.as_bytes().get(n) {
                None => return Step::More,
                Some(b'{') if !name.is_empty() && k.allows(&name) => {}
                Some(_) => return Step::Invalid,
            }
            self.buf.drain(..n);
            out.push(Found::Start(name.clone()));
            self.name = Some(name);
            self.sent = Some(0);
        }
        if let Some(sent) = &mut self.sent {
            let seen = value(&self.buf);
            let upto = match seen {
                Seen::Whole(e) => e,
                _ => self.buf.len(),
            };
            if upto > *sent {
                out.push(Found::Args(self.buf[*sent..upto].to_string()));
                *sent = upto;
            }
            let Seen::Whole(e) = seen else {
                return Step::More;
            };
            out.push(Found::End(None));
            self.buf.drain(..e);
            self.sent = None;
            self.done = true;
        }
        let n = space(&self.buf);
        match literal(&self.buf[n..], "</function>") {
            Seen::Whole(e) => Step::Done(self.buf.split_off(n + e)),
            Seen::Partial => Step::More,
            Seen::No => Step::Done(std::mem::take(&mut self.buf)),
        }
    }

    fn finish(&mut self, out: &mut Vec<Found>) -> Step {
        if self.sent.is_some() {
            out.push(Found::End(None));
        }
        if self.name.is_some() {
            Step::Done(String::new())
        } else {
            Step::Invalid
        }
    }
}

/// Tags models put around a JSON call instead of `<tool_call>`.
pub const TAGS: [(&str, &str); 8] = [
    ("<tool_call>", "</tool_call>"),
    ("<function_call>", "</function_call>"),
    ("<tool>", "</tool>"),
    ("<tools>", "</tools>"),
    ("<response>", "</response>"),
    ("<json>", "</json>"),
    ("<xml>", "</xml>"),
    ("<JSON>", "</JSON>"),
];

/// A fenced block (```` ```json ````, ```` ```xml ````, ```` ``` ````) holding a JSON call,
/// bare or in one of the tags.
pub struct Fence {
    buf: String,
    inner: Option<JsonCalls>,
    /// The inner calls ended; the closing fence is next.
    closing: bool,
}

impl Fence {
    pub fn new() -> Self {
        Self {
            buf: String::new(),
            inner: None,
            closing: false,
        }
    }
}

impl Section for Fence {
    fn feed(&mut self, text: &str, k: &Known, out: &mut Vec<Found>) -> Step {
        self.buf.push_str(text);
        if self.closing {
            let n = space(&self.buf);
            return match literal(&self.buf[n..], "```") {
                Seen::Whole(e) => Step::Done(self.buf.split_off(n + e)),
                Seen::Partial => Step::More,
                Seen::No => Step::Done(std::mem::take(&mut self.buf)),
            };
        }
        if self.inner.is_none() {
            // The language, then an optional tag before the JSON.
            let lang = self.buf.bytes().take_while(u8::is_ascii_alphabetic).count();
            let n = lang + space(&self.buf[lang..]);
            let rest = &self.buf[n..];
            if rest.is_empty() {
                return Step::More;
            }
            let mut close: &'static [&'static str] = &[];
            let mut skip = n;
            if rest.starts_with('<') {
                let tag = TAGS
                    .iter()
                    .map(|(open, close)| (literal(rest, open), close))
                    .find(|(s, _)| *s != Seen::No);
                match tag {
                    Some((Seen::Whole(t), c)) => {
                        skip += t;
                        close = std::slice::from_ref(c);
                    }
                    Some(_) => return Step::More,
                    None => return Step::Invalid,
                }
            } else if !rest.starts_with('{') {
                return Step::Invalid;
            }
            self.buf.drain(..skip);
            self.inner = Some(JsonCalls::new(PLAIN, false, false, close));
        }
        let text = std::mem::take(&mut self.buf);
        let inner = self.inner.as_mut().expect("set above");
        match inner.feed(&text, k, out) {
            Step::Done(rest) => {
                self.closing = true;
                self.feed(&rest, k, out)
            }
            other => other,
        }
    }

    fn finish(&mut self, out: &mut Vec<Found>) -> Step {
        match &mut self.inner {
            Some(inner) if !self.closing => inner.finish(out),
            Some(_) => Step::Done(std::mem::take(&mut self.buf)),
            None => Step::Invalid,
        }
    }
}

/// Llama 3.1 after `<|python_tag|>`: JSON calls, or a built-in tool's
/// `name.call(key="value", ...)`.
pub struct PythonTag {
    buf: String,
    json: Option<JsonCalls>,
}

impl PythonTag {
    pub fn new() -> Self {
        Self {
            buf: String::new(),
            json: None,
        }
    }
}

/// Python literal arguments (`key="value", n=1, ok=True`) as a JSON object.
fn python_args(text: &str) -> Option<Map<String, Value>> {
    let mut args = Map::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let v = rest[eq + 1..].trim_start();
        let (val, used) = match v.as_bytes().first()? {
            b'"' => match value(v) {
                Seen::Whole(e) => (serde_json::from_str(&v[..e]).ok()?, e),
                _ => return None,
            },
            _ => {
                let e = v.find(',').unwrap_or(v.len());
                let word = v[..e].trim();
                let val = match word {
                    "True" => Value::Bool(true),
                    "False" => Value::Bool(false),
                    "None" => Value::Null,
                    w => serde_json::from_str(w).ok()?,
                };
                (val, e)
            }
        };
        args.insert(key.to_string(), val);
        rest = v[used..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    Some(args)
}

impl Section for PythonTag {
    fn feed(&mut self, text: &str, k: &Known, out: &mut Vec<Found>) -> Step {
        if let Some(json) = &mut self.json {
            return json.feed(text, k, out);
        }
        self.buf.push_str(text);
        let n = space(&self.buf);
        match self.buf.as_bytes().get(n) {
            None => return Step::More,
            Some(b'{') => {
                let mut json = JsonCalls::new(PLAIN, false, true, &[]);
                let text = self.buf.split_off(n);
                let step = json.feed(&text, k, out);
                self.json = Some(json);
                return step;
            }
            Some(_) => {}
        }
        let Some(close) = self.buf.rfind(')') else {
            return Step::More;
        };
        let head = self.buf[n..close].to_string();
        let call = head.split_once(".call(").and_then(|(name, args)| {
            let name = name.trim();
            (k.allows(name) && !name.is_empty()).then(|| (name.to_string(), python_args(args)))
        });
        match call {
            Some((name, Some(args))) => {
                out.push(Found::Start(name));
                out.push(Found::Args(Value::Object(args).to_string()));
                out.push(Found::End(None));
                Step::Done(self.buf.split_off(close + 1))
            }
            // The arguments may still be coming (a `)` inside a string).
            Some((_, None)) => Step::More,
            None => Step::Invalid,
        }
    }

    fn finish(&mut self, out: &mut Vec<Found>) -> Step {
        match &mut self.json {
            Some(json) => json.finish(out),
            None => Step::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_literals_become_json() {
        let a = python_args(r#"code="print('hey')", n=2, ok=True, x=None"#).unwrap();
        assert_eq!(
            Value::Object(a),
            json!({"code": "print('hey')", "n": 2, "ok": true, "x": null})
        );
        assert!(python_args("oops").is_none());
    }
}
