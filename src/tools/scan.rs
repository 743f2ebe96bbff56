//! Reading JSON that is still being written: where a value ends (if it has yet), and the
//! members of a call object (`{"name": …, "arguments": {…}}`) as far as they go.

/// What a text holds at some point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// The thing, ending at this byte offset.
    Whole(usize),
    /// Its beginning, cut off by the end of the text.
    Partial,
    /// Something else.
    No,
}

/// Whether `text` starts with `lit`, or with part of it up to its end.
pub(super) fn literal(text: &str, lit: &str) -> Seen {
    if text.starts_with(lit) {
        Seen::Whole(lit.len())
    } else if lit.starts_with(text) {
        Seen::Partial
    } else {
        Seen::No
    }
}

/// Bytes of leading whitespace.
pub(super) fn space(text: &str) -> usize {
    text.len() - text.trim_start().len()
}

/// Length of the longest suffix of `s` that is a proper prefix of `marker`.
pub(super) fn partial_suffix(s: &str, marker: &str) -> usize {
    (1..marker.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.is_char_boundary(s.len() - k) && marker.starts_with(&s[s.len() - k..]))
        .unwrap_or(0)
}

/// A JSON string at the start of `text` (which starts with `"`).
fn string(text: &str) -> Seen {
    let b = text.as_bytes();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Seen::Whole(i + 1),
            _ => i += 1,
        }
    }
    Seen::Partial
}

/// One JSON value at the start of `text` (no leading whitespace): an object or array
/// (brackets balanced outside strings), a string, or a scalar. Only its extent is found;
/// serde_json judges it once whole.
pub(super) fn value(text: &str) -> Seen {
    let b = text.as_bytes();
    match b.first() {
        None => Seen::Partial,
        Some(b'"') => string(text),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b'"' => match string(&text[i..]) {
                        Seen::Whole(n) => {
                            i += n;
                            continue;
                        }
                        _ => return Seen::Partial,
                    },
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Seen::Whole(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            Seen::Partial
        }
        Some(c) if c.is_ascii_alphanumeric() || *c == b'-' => {
            let n = b
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || b"-+.".contains(c))
                .count();
            if n == b.len() {
                Seen::Partial
            } else {
                Seen::Whole(n)
            }
        }
        Some(_) => Seen::No,
    }
}

/// The keys a family names a call's parts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Keys {
    pub name: &'static str,
    /// The arguments' key, and another some models use instead.
    pub args: [&'static str; 2],
    pub id: &'static str,
}

/// `{"name": …, "arguments"|"parameters": {…}}` (Hermes, Llama 3, Mistral, Granite).
pub(super) const PLAIN: Keys = Keys {
    name: "name",
    args: ["arguments", "parameters"],
    id: "id",
};

/// Command R7B's `{"tool_call_id": …, "tool_name": …, "parameters": {…}}`.
pub(super) const COHERE: Keys = Keys {
    name: "tool_name",
    args: ["parameters", "arguments"],
    id: "tool_call_id",
};

/// What is known of a call object so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct CallSoFar {
    /// The function, once its string is whole.
    pub name: Option<String>,
    /// The call's own id, once whole (a string or a number).
    pub id: Option<String>,
    /// Where the arguments' value starts, and where it ends once whole.
    pub args: Option<(usize, Option<usize>)>,
    /// The object's end, once whole.
    pub end: Option<usize>,
    /// Not a call object (or not one that can become one).
    pub bad: bool,
}

/// Reads the call object at the start of `text` (which starts with `{`) as far as it
/// goes.
pub(super) fn call_object(text: &str, keys: Keys) -> CallSoFar {
    let mut c = CallSoFar::default();
    let mut i = 1;
    loop {
        i += space(&text[i..]);
        let rest = &text[i..];
        match rest.as_bytes().first() {
            None => return c,
            Some(b'}') => {
                c.end = Some(i + 1);
                return c;
            }
            Some(b',') => {
                i += 1;
                continue;
            }
            Some(b'"') => {}
            Some(_) => {
                c.bad = true;
                return c;
            }
        }
        let Seen::Whole(n) = string(rest) else {
            return c;
        };
        let Ok(key) = serde_json::from_str::<String>(&rest[..n]) else {
            c.bad = true;
            return c;
        };
        i += n;
        i += space(&text[i..]);
        match text.as_bytes()[i..].first() {
            None => return c,
            Some(b':') => i += 1,
            Some(_) => {
                c.bad = true;
                return c;
            }
        }
        i += space(&text[i..]);
        let start = i;
        let seen = value(&text[i..]);
        if keys.args.contains(&key.as_str()) && c.args.is_none() {
            c.args = match seen {
                Seen::No => None,
                Seen::Whole(n) => Some((start, Some(start + n))),
                Seen::Partial if start < text.len() => Some((start, None)),
                Seen::Partial => None,
            };
        }
        let Seen::Whole(n) = seen else {
            c.bad |= seen == Seen::No;
            return c;
        };
        let v = &text[start..start + n];
        if key == keys.name {
            match serde_json::from_str::<String>(v) {
                Ok(name) => c.name = Some(name),
                Err(_) => {
                    c.bad = true;
                    return c;
                }
            }
        } else if key == keys.id {
            c.id = match serde_json::from_str::<serde_json::Value>(v) {
                Ok(serde_json::Value::String(s)) => Some(s),
                Ok(other) => Some(other.to_string()),
                Err(_) => None,
            };
        }
        i = start + n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_end_where_json_says() {
        assert_eq!(value(r#"{"a": "}", "b": [1, {}]} tail"#), Seen::Whole(24));
        assert_eq!(value(r#"{"a": "\"}"#), Seen::Partial);
        assert_eq!(value(r#""x\"y" z"#), Seen::Whole(6));
        assert_eq!(value("12, "), Seen::Whole(2));
        assert_eq!(value("12"), Seen::Partial);
        assert_eq!(value("<"), Seen::No);
    }

    #[test]
    fn call_objects_are_read_as_far_as_they_go() {
        let t = r#"{"name": "f", "arguments": {"x": [1"#;
        let c = call_object(t, PLAIN);
        assert_eq!(c.name.as_deref(), Some("f"));
        assert_eq!(c.args, Some((27, None)));
        assert_eq!(c.end, None);
        let t = r#"{"name": "f", "arguments": {"x": 1}, "id": "abc"} more"#;
        let c = call_object(t, PLAIN);
        assert_eq!(c.args, Some((27, Some(35))));
        assert_eq!(c.id.as_deref(), Some("abc"));
        assert_eq!(c.end, Some(49));
        assert!(call_object(r#"{"name": 3}"#, PLAIN).bad);
        assert!(call_object("{oops}", PLAIN).bad);
    }
}
