//! Server-sent events as every test reads them: one parser, by the format's rules
//! (events end at a blank line, `data:` lines join with newlines, one space after the
//! colon dropped, `event:` names kept, comments skipped), so that no test judges a stream
//! by searching its text.

use serde_json::Value;

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The `event:` name, if any (Anthropic's Messages and OpenAI's Responses name theirs).
    pub name: Option<String>,
    /// The `data:` lines, joined with newlines.
    pub data: String,
}

impl Event {
    /// Whether this is OpenAI's end marker, `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == "[DONE]"
    }

    /// The data as JSON; panics (naming the event) when it is neither JSON nor `[DONE]`.
    pub fn json(&self) -> Option<Value> {
        if self.is_done() {
            return None;
        }
        Some(serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {self:?}")))
    }

    /// The error object of an error event (`{"error": {...}}`, or Anthropic's
    /// `{"type": "error", "error": {...}}`).
    pub fn error(&self) -> Option<Value> {
        self.json()?.get_mut("error").map(Value::take)
    }
}

/// The complete events of `raw`, in order: a trailing event cut off before its blank line
/// (a stream that broke) is left out.
pub fn events(raw: &str) -> Vec<Event> {
    let raw = raw.replace("\r\n", "\n");
    let mut out = Vec::new();
    let (mut name, mut data): (Option<String>, Option<String>) = (None, None);
    let mut rest = raw.as_str();
    while let Some(end) = rest.find('\n') {
        let line = &rest[..end];
        rest = &rest[end + 1..];
        if line.is_empty() {
            if let Some(data) = data.take() {
                out.push(Event {
                    name: name.take(),
                    data,
                });
            }
            name = None;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_string()),
            },
            "event" => name = Some(value.to_string()),
            _ => {}
        }
    }
    out
}

/// The JSON payloads of `raw`'s events (panicking on data that is neither JSON nor
/// `[DONE]`), and whether the stream ended with `[DONE]`.
pub fn chunks(raw: &str) -> (Vec<Value>, bool) {
    let events = events(raw);
    let done = events.last().is_some_and(Event::is_done);
    (events.iter().filter_map(Event::json).collect(), done)
}

/// The JSON payloads of a stream that finished: `Err` naming the first error event, or
/// saying the stream ended without `[DONE]`.
pub fn finished(raw: &str) -> Result<Vec<Value>, String> {
    let events = events(raw);
    if let Some(e) = events.iter().find_map(Event::error) {
        return Err(e.to_string());
    }
    if !events.last().is_some_and(Event::is_done) {
        return Err(format!("no [DONE]: {raw}"));
    }
    Ok(events.iter().filter_map(Event::json).collect())
}

/// Reads a streamed response's whole body.
pub async fn body(resp: reqwest::Response) -> Result<String, String> {
    use futures::StreamExt;
    let mut raw = String::new();
    let mut s = resp.bytes_stream();
    while let Some(chunk) = s.next().await {
        raw.push_str(&String::from_utf8_lossy(&chunk.map_err(|e| e.to_string())?));
    }
    Ok(raw)
}
