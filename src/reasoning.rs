//! Reasoning models: which markers a chat template's model thinks between, and the
//! thinking split out of an answer, whole or streamed, as `reasoning_content`
//! (docs/ARCHITECTURE.md, "Reasoning"). The engine's side (the budget, and grammars that
//! start after the thinking) is `sluice_engine::ThinkSpec`.

/// The markers a family writes its thinking between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// `<think>` … `</think>`: DeepSeek R1 and its distills, Qwen 3, QwQ, SmolLM3, Granite,
    /// Phi-4 reasoning.
    Think,
    /// Command R7B: `<|START_THINKING|>` … `<|END_THINKING|>`.
    CommandR,
    /// Magistral and Ministral reasoning models: `[THINK]` … `[/THINK]`.
    Mistral,
}

impl ReasoningFormat {
    /// The format named by `--reasoning-parser`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "think" | "deepseek_r1" | "qwen3" | "granite" | "smollm3" => Some(Self::Think),
            "command_r7b" => Some(Self::CommandR),
            "mistral" => Some(Self::Mistral),
            _ => None,
        }
    }

    /// The format a chat template's model thinks in, if it does.
    pub fn of_template(source: &str) -> Option<Self> {
        if source.contains("<|START_THINKING|>") {
            Some(Self::CommandR)
        } else if source.contains("[THINK]") {
            Some(Self::Mistral)
        } else if source.contains("<think>") || source.contains("</think>") {
            Some(Self::Think)
        } else {
            None
        }
    }

    /// The opening marker.
    pub fn start(self) -> &'static str {
        match self {
            Self::Think => "<think>",
            Self::CommandR => "<|START_THINKING|>",
            Self::Mistral => "[THINK]",
        }
    }

    /// The closing marker.
    pub fn end(self) -> &'static str {
        match self {
            Self::Think => "</think>",
            Self::CommandR => "<|END_THINKING|>",
            Self::Mistral => "[/THINK]",
        }
    }

    /// Whether a rendered prompt leaves the thinking open (its generation prompt ends with
    /// the opening marker, as DeepSeek R1's does): the answer starts inside it.
    pub fn opened_by(self, prompt: &str) -> bool {
        let p = prompt.trim_end();
        match (p.rfind(self.start()), p.rfind(self.end())) {
            (Some(s), Some(e)) => s > e && p[s..].trim_end() == self.start(),
            (Some(s), None) => p[s..].trim_end() == self.start(),
            _ => false,
        }
    }
}

/// How the thinking of one request's answers is split out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReasoningReader {
    /// The markers.
    pub format: ReasoningFormat,
    /// The prompt opened the thinking.
    pub open: bool,
    /// A marker that ends the thinking when it comes before the closing marker (a
    /// Qwen 3.5 / Qwen3-Coder model may go from thinking straight to `<tool_call>`; the
    /// marker then starts the answer).
    pub interrupt: Option<&'static str>,
}

/// An answer's thinking and the rest.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// The thinking, without its markers.
    pub reasoning: String,
    /// The answer after it.
    pub content: String,
}

impl ReasoningReader {
    /// The thinking and the answer of a whole text.
    pub fn read(&self, text: &str) -> Split {
        let mut s = self.stream();
        let mut out = s.push(text);
        let rest = s.finish();
        out.reasoning.push_str(&rest.reasoning);
        out.content.push_str(&rest.content);
        out
    }

    /// A splitter of one streamed answer.
    pub fn stream(&self) -> ReasoningStream {
        ReasoningStream {
            format: self.format,
            phase: if self.open {
                Phase::Inside
            } else {
                Phase::Before
            },
            held: String::new(),
            seen_reasoning: false,
            interrupt: self.interrupt,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Only whitespace or part of the opening marker so far.
    Before,
    Inside,
    /// After the closing marker, before any text but whitespace.
    Between,
    /// In the answer.
    After,
}

/// The per-choice state of a streamed answer's split: text that may be part of a marker
/// waits until it is known.
#[derive(Clone, Debug)]
pub struct ReasoningStream {
    format: ReasoningFormat,
    phase: Phase,
    held: String,
    /// Some thinking text other than leading whitespace has been sent.
    seen_reasoning: bool,
    interrupt: Option<&'static str>,
}

/// Length of the longest suffix of `s` that is a proper prefix of `marker`.
fn partial_suffix(s: &str, marker: &str) -> usize {
    (1..marker.len().min(s.len() + 1))
        .rev()
        .find(|&k| s.is_char_boundary(s.len() - k) && marker.starts_with(&s[s.len() - k..]))
        .unwrap_or(0)
}

impl ReasoningStream {
    /// Takes the next piece of text; returns what can be sent now.
    pub fn push(&mut self, text: &str) -> Split {
        self.held.push_str(text);
        let mut out = Split::default();
        loop {
            match self.phase {
                Phase::Before => {
                    let t = self.held.trim_start();
                    let start = self.format.start();
                    if let Some(rest) = t.strip_prefix(start) {
                        self.held = rest.to_string();
                        self.phase = Phase::Inside;
                    } else if start.starts_with(t) {
                        return out;
                    } else {
                        self.phase = Phase::After;
                    }
                }
                Phase::Inside => {
                    let end = self.format.end();
                    let cut = self.interrupt.and_then(|m| self.held.find(m));
                    if let Some(at) = cut.filter(|&c| self.held.find(end).is_none_or(|e| c < e)) {
                        let thought = self.held[..at].to_string();
                        self.emit_reasoning(&mut out, &thought, true);
                        self.held.drain(..at);
                        self.phase = Phase::After;
                        continue;
                    }
                    if let Some(at) = self.held.find(end) {
                        let thought = self.held[..at].to_string();
                        self.emit_reasoning(&mut out, &thought, true);
                        self.held.drain(..at + end.len());
                        self.phase = Phase::Between;
                        continue;
                    }
                    let keep = partial_suffix(&self.held, end)
                        .max(self.interrupt.map_or(0, |m| partial_suffix(&self.held, m)));
                    let now: String = self.held.drain(..self.held.len() - keep).collect();
                    self.emit_reasoning(&mut out, &now, false);
                    return out;
                }
                Phase::Between => {
                    let t = self.held.trim_start();
                    if t.is_empty() {
                        self.held.clear();
                        return out;
                    }
                    self.held = t.to_string();
                    self.phase = Phase::After;
                }
                Phase::After => {
                    out.content.push_str(&self.held);
                    self.held.clear();
                    return out;
                }
            }
        }
    }

    /// Thinking text: leading whitespace is dropped, and trailing whitespace before the
    /// closing marker (`last`) too; whitespace at the end of a piece waits, as it may be
    /// the marker's.
    fn emit_reasoning(&mut self, out: &mut Split, text: &str, last: bool) {
        let mut t = text;
        if !self.seen_reasoning {
            t = t.trim_start();
        }
        if last {
            t = t.trim_end();
        } else {
            let body = t.trim_end();
            self.held.insert_str(0, &t[body.len()..]);
            t = body;
        }
        if !t.is_empty() {
            self.seen_reasoning = true;
            out.reasoning.push_str(t);
        }
    }

    /// What is still held when the answer ends: unfinished thinking is thinking; text
    /// that only looked like the start of the opening marker is content.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        let mut out = Split::default();
        match self.phase {
            Phase::Before | Phase::After => out.content = held,
            Phase::Inside => self.emit_reasoning(&mut out, &held, true),
            Phase::Between => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(open: bool) -> ReasoningReader {
        ReasoningReader {
            format: ReasoningFormat::Think,
            open,
            interrupt: None,
        }
    }

    fn streamed(r: ReasoningReader, pieces: &[&str]) -> Split {
        let mut s = r.stream();
        let mut all = Split::default();
        let mut parts: Vec<Split> = pieces.iter().map(|p| s.push(p)).collect();
        parts.push(s.finish());
        for p in parts {
            all.reasoning.push_str(&p.reasoning);
            all.content.push_str(&p.content);
        }
        all
    }

    fn split(reasoning: &str, content: &str) -> Split {
        Split {
            reasoning: reasoning.into(),
            content: content.into(),
        }
    }

    #[test]
    fn thinking_then_answer() {
        let want = split("Let me see.\nYes.", "It is 4.");
        let text = "<think>\nLet me see.\nYes.\n</think>\n\nIt is 4.";
        assert_eq!(reader(false).read(text), want);
        let pieces = [
            "<th",
            "ink>\nLet",
            " me see.\n",
            "Yes.\n</",
            "think",
            ">\n\n",
            "It is 4.",
        ];
        assert_eq!(streamed(reader(false), &pieces), want);
        // Byte by byte.
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = bytes.iter().map(String::as_str).collect();
        assert_eq!(streamed(reader(false), &refs), want);
    }

    #[test]
    fn an_answer_without_thinking_is_content() {
        assert_eq!(
            reader(false).read("Hello <think>"),
            split("", "Hello <think>")
        );
        assert_eq!(streamed(reader(false), &["<", "b>hi"]), split("", "<b>hi"));
        assert_eq!(streamed(reader(false), &["<thi"]), split("", "<thi"));
    }

    #[test]
    fn thinking_opened_by_the_prompt() {
        assert_eq!(reader(true).read("hm</think>ok"), split("hm", "ok"));
        // Cut short: all of it is thinking.
        assert_eq!(reader(true).read("hm, so"), split("hm, so", ""));
        assert_eq!(
            streamed(reader(true), &["hm, ", "so </", "thi"]),
            split("hm, so </thi", "")
        );
    }

    #[test]
    fn the_prompt_opens_the_thinking_when_it_ends_with_the_marker() {
        let f = ReasoningFormat::Think;
        assert!(f.opened_by("<|Assistant|><think>\n"));
        assert!(!f.opened_by("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
        assert!(!f.opened_by("<|im_start|>assistant\n"));
        assert!(!f.opened_by("<think>a</think> user: <think> is a tag\n"));
    }

    #[test]
    fn formats_are_found_in_templates() {
        assert_eq!(
            ReasoningFormat::of_template("{{ '<think>' }}"),
            Some(ReasoningFormat::Think)
        );
        assert_eq!(
            ReasoningFormat::of_template("<|START_THINKING|>"),
            Some(ReasoningFormat::CommandR)
        );
        assert_eq!(ReasoningFormat::of_template("<|im_start|>"), None);
    }
}
