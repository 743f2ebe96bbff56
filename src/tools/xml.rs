//! Qwen3-Coder's (and Qwen 3.5's) calls: `<tool_call>` then `<function=NAME>`, one
//! `<parameter=P>` … `</parameter>` per argument with the value as plain text, then
//! `</function>` and `</tool_call>`. Values become JSON by the parameter's schema type, as
//! the template wrote them: text for strings, JSON for the rest (text if it is not JSON).

use serde_json::Value;

use super::scan::{Seen, literal, space};
use super::sections::{Found, Known, Section, Step, give_up};

const FUNCTION: &str = "<function=";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";
const FUNCTION_END: &str = "</function>";
const CLOSE: &str = "</tool_call>";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum X {
    /// Before `<function=`.
    Function,
    /// Inside a function, between parameters.
    Params,
    /// Inside a parameter's value.
    Value,
    /// After `</function>`.
    After,
}

/// One `<tool_call>` section (its opening marker may be left out: it then starts at
/// `<function=`).
pub struct QwenXml {
    buf: String,
    state: X,
    name: String,
    param: String,
    /// Arguments written so far.
    params: usize,
    any: bool,
}

impl QwenXml {
    pub fn new() -> Self {
        Self {
            buf: String::new(),
            state: X::Function,
            name: String::new(),
            param: String::new(),
            params: 0,
            any: false,
        }
    }

    fn stop(&mut self) -> Step {
        give_up(self.any, &mut self.buf)
    }

    /// `<tag=NAME>` at the start of the buffer: `Ok(Some(name))`, `Ok(None)` for more text.
    fn tag(&mut self, tag: &str) -> Result<Option<String>, ()> {
        match literal(&self.buf, tag) {
            Seen::Partial => return Ok(None),
            Seen::No => return Err(()),
            Seen::Whole(_) => {}
        }
        let Some(end) = self.buf.find('>') else {
            return if self.buf.contains('\n') {
                Err(())
            } else {
                Ok(None)
            };
        };
        let name = self.buf[tag.len()..end].trim().to_string();
        self.buf.drain(..end + 1);
        Ok(Some(name))
    }

    fn close_call(&mut self, out: &mut Vec<Found>) {
        out.push(Found::Args(
            if self.params == 0 { "{}" } else { "}" }.into(),
        ));
        out.push(Found::End(None));
        self.state = X::After;
    }
}

/// The JSON of a parameter's text, by its schema.
pub(super) fn typed(text: &str, schema: Option<&Value>) -> Value {
    let types: Vec<&str> = match schema.and_then(|s| s.get("type")) {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        // No type (an `enum`, or no schema): text unless it is JSON.
        _ if schema.is_some_and(|s| s.get("enum").is_some()) => vec!["string"],
        _ => Vec::new(),
    };
    let text_only = !types.is_empty() && types.iter().all(|t| *t == "string" || *t == "null");
    if text_only {
        if text == "null" && types.contains(&"null") {
            return Value::Null;
        }
        return Value::String(text.to_string());
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

impl Section for QwenXml {
    fn feed(&mut self, text: &str, k: &Known, out: &mut Vec<Found>) -> Step {
        self.buf.push_str(text);
        loop {
            if self.state != X::Value {
                let n = space(&self.buf);
                self.buf.drain(..n);
                if self.buf.is_empty() {
                    return Step::More;
                }
            }
            match self.state {
                X::Function => match self.tag(FUNCTION) {
                    Ok(None) => return Step::More,
                    Ok(Some(name)) if !name.is_empty() && k.allows(&name) => {
                        out.push(Found::Start(name.clone()));
                        self.name = name;
                        self.params = 0;
                        self.any = true;
                        self.state = X::Params;
                    }
                    _ => return self.stop(),
                },
                X::Params => {
                    match literal(&self.buf, FUNCTION_END) {
                        Seen::Whole(n) => {
                            self.buf.drain(..n);
                            self.close_call(out);
                            continue;
                        }
                        Seen::Partial if self.buf.len() < FUNCTION_END.len() => {
                            return Step::More;
                        }
                        _ => {}
                    }
                    match self.tag(PARAMETER) {
                        Ok(None) => return Step::More,
                        Ok(Some(p)) => {
                            self.param = p;
                            self.state = X::Value;
                        }
                        Err(()) => {
                            // Not a parameter: the call ends here.
                            self.close_call(out);
                            return Step::Done(std::mem::take(&mut self.buf));
                        }
                    }
                }
                X::Value => {
                    let Some(at) = self.buf.find(PARAMETER_END) else {
                        return Step::More;
                    };
                    let raw = &self.buf[..at];
                    let raw = raw.strip_prefix('\n').unwrap_or(raw);
                    let raw = raw.strip_suffix('\n').unwrap_or(raw);
                    let schema = (k.params)(&self.name)
                        .and_then(|p| p.get("properties"))
                        .and_then(|p| p.get(&self.param));
                    let v = typed(raw, schema);
                    let key = Value::String(self.param.clone()).to_string();
                    let sep = if self.params == 0 { "{" } else { ", " };
                    out.push(Found::Args(format!("{sep}{key}: {v}")));
                    self.params += 1;
                    self.buf.drain(..at + PARAMETER_END.len());
                    self.state = X::Params;
                }
                X::After => {
                    return match literal(&self.buf, CLOSE) {
                        Seen::Whole(n) => Step::Done(self.buf.split_off(n)),
                        Seen::Partial => Step::More,
                        Seen::No => Step::Done(std::mem::take(&mut self.buf)),
                    };
                }
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<Found>) -> Step {
        match self.state {
            X::Function => self.stop(),
            X::After => Step::Done(String::new()),
            X::Params | X::Value => {
                self.close_call(out);
                Step::Done(String::new())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_take_their_schema_type() {
        let int = json!({"type": "integer"});
        let s = json!({"type": "string"});
        let ns = json!({"type": ["null", "string"]});
        let union = json!({"type": ["string", "object"]});
        assert_eq!(typed("42", Some(&int)), json!(42));
        assert_eq!(typed("42", Some(&s)), json!("42"));
        assert_eq!(typed("null", Some(&ns)), Value::Null);
        assert_eq!(typed("{\"a\": 1}", Some(&union)), json!({"a": 1}));
        assert_eq!(typed("{oops", Some(&union)), json!("{oops"));
        assert_eq!(typed("c", Some(&json!({"enum": ["c"]}))), json!("c"));
        assert_eq!(typed("[1]", None), json!([1]));
    }
}
