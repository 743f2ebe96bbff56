//! A reasoning model's thinking section in the output (docs/ARCHITECTURE.md,
//! "Reasoning"): where it is, so a request's grammar constrains only the answer after it,
//! and its budget, past which the end marker is forced token by token.

use std::collections::VecDeque;

/// A request's thinking section, as validation found it in the chat template.
#[derive(Clone, Debug, PartialEq)]
pub struct ThinkSpec {
    /// The marker that opens the section (`<think>`).
    pub start: String,
    /// The opening marker as one token, when the vocabulary has it so: a grammar lets the
    /// answer start with it.
    pub start_id: Option<u32>,
    /// The marker that closes it (`</think>`).
    pub end: String,
    /// The closing marker's tokens, forced when the budget runs out.
    pub end_ids: Vec<u32>,
    /// The prompt opened the section: the output starts inside it.
    pub open: bool,
    /// Tokens the section may hold before its end is forced (`None`: no limit).
    pub budget: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing but whitespace or part of the opening marker yet.
    Before,
    /// Inside the section.
    Inside,
    /// In the answer (after the section, or with none).
    After,
}

/// One sequence's place relative to its thinking section.
#[derive(Clone, Debug)]
pub(crate) struct Thinking {
    spec: ThinkSpec,
    phase: Phase,
    /// Output text not yet decided (before the section) or the section's last bytes.
    text: String,
    /// Tokens inside the section, markers not counted.
    spent: usize,
    /// Tokens before the answer: the section with its markers.
    tokens: usize,
    /// Tokens still to force (the end marker's).
    forced: VecDeque<u32>,
}

impl Thinking {
    pub(crate) fn new(spec: ThinkSpec) -> Self {
        let mut t = Self {
            phase: if spec.open {
                Phase::Inside
            } else {
                Phase::Before
            },
            spec,
            text: String::new(),
            spent: 0,
            tokens: 0,
            forced: VecDeque::new(),
        };
        t.check_budget();
        t
    }

    /// Tokens of the output that were thinking (with the markers).
    pub(crate) fn tokens(&self) -> usize {
        if self.phase == Phase::Before {
            0
        } else {
            self.tokens
        }
    }

    /// Whether the grammar's mask applies to the next token.
    pub(crate) fn grammar_on(&self) -> bool {
        self.phase != Phase::Inside
    }

    /// A token the grammar's mask must also allow: the opening marker, before the answer.
    pub(crate) fn opener(&self) -> Option<u32> {
        self.spec.start_id.filter(|_| self.phase == Phase::Before)
    }

    /// Whether `token`, just chosen, goes to the grammar.
    pub(crate) fn feeds_grammar(&self, token: u32) -> bool {
        match self.phase {
            Phase::After => true,
            Phase::Before => self.spec.start_id != Some(token),
            Phase::Inside => false,
        }
    }

    /// The token the next choice must be.
    pub(crate) fn forced(&self) -> Option<u32> {
        self.forced.front().copied()
    }

    /// Whether the sequence may speculate: not while a budget counts its tokens.
    pub(crate) fn may_draft(&self) -> bool {
        self.phase == Phase::After || self.spec.budget.is_none()
    }

    fn check_budget(&mut self) {
        if self.phase == Phase::Inside
            && self.forced.is_empty()
            && self.spec.budget.is_some_and(|b| self.spent >= b)
        {
            self.forced = self.spec.end_ids.iter().copied().collect();
            if self.forced.is_empty() {
                self.phase = Phase::After;
            }
        }
    }

    /// Takes the chosen `token`, whose text became `text`.
    pub(crate) fn advance(&mut self, token: u32, text: &str) {
        match self.phase {
            Phase::After => {}
            Phase::Before => {
                self.tokens += 1;
                if self.spec.start_id == Some(token) {
                    self.phase = Phase::Inside;
                    self.text.clear();
                    self.check_budget();
                    return;
                }
                self.text.push_str(text);
                let t = self.text.trim_start();
                if let Some(rest) = t.strip_prefix(self.spec.start.as_str()) {
                    self.phase = Phase::Inside;
                    self.text = rest.to_string();
                    self.check_budget();
                    self.after_text();
                } else if !self.spec.start.starts_with(t) {
                    self.phase = Phase::After;
                    self.text.clear();
                    self.tokens = 0;
                }
            }
            Phase::Inside => {
                self.tokens += 1;
                if self.forced.front() == Some(&token) {
                    self.forced.pop_front();
                    if self.forced.is_empty() {
                        self.phase = Phase::After;
                        self.text.clear();
                    }
                    return;
                }
                // A forced token that was not chosen (cannot happen: the mask allows it
                // alone) would leave the marker half written: start it again.
                if !self.forced.is_empty() {
                    self.forced = self.spec.end_ids.iter().copied().collect();
                    return;
                }
                self.text.push_str(text);
                if self.spec.end_ids == [token] {
                    self.phase = Phase::After;
                    self.text.clear();
                    return;
                }
                self.spent += 1;
                self.after_text();
                self.check_budget();
            }
        }
    }

    /// Inside: ends the section if its text holds the end marker, else keeps only a tail
    /// long enough to find it.
    fn after_text(&mut self) {
        if self.text.contains(self.spec.end.as_str()) {
            self.phase = Phase::After;
            self.forced.clear();
            self.text.clear();
            return;
        }
        let keep = self.spec.end.len();
        if self.text.len() > keep {
            let mut cut = self.text.len() - keep;
            while !self.text.is_char_boundary(cut) {
                cut -= 1;
            }
            self.text.drain(..cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(open: bool, budget: Option<usize>) -> ThinkSpec {
        ThinkSpec {
            start: "<think>".into(),
            start_id: Some(7),
            end: "</think>".into(),
            end_ids: vec![8, 9],
            open,
            budget,
        }
    }

    #[test]
    fn a_section_opened_by_text_ends_at_its_marker() {
        let mut t = Thinking::new(spec(false, None));
        assert!(t.grammar_on());
        assert_eq!(t.opener(), Some(7));
        t.advance(1, "\n<th");
        assert!(t.grammar_on(), "still undecided");
        t.advance(2, "ink>hm");
        assert!(!t.grammar_on());
        t.advance(3, " </thi");
        assert!(!t.grammar_on());
        t.advance(4, "nk>\n");
        assert!(t.grammar_on());
        assert!(t.feeds_grammar(5));
        assert_eq!(t.tokens(), 4);
    }

    #[test]
    fn an_answer_without_a_section_has_no_thinking_tokens() {
        let mut t = Thinking::new(spec(false, Some(1)));
        t.advance(1, "\n");
        t.advance(1, "Hello");
        assert!(t.grammar_on());
        assert_eq!(t.tokens(), 0);
        assert_eq!(t.forced(), None);
    }

    #[test]
    fn the_opening_token_bypasses_the_grammar() {
        let mut t = Thinking::new(spec(false, None));
        assert!(!t.feeds_grammar(7));
        t.advance(7, "<think>");
        assert!(!t.grammar_on());
        assert!(!t.feeds_grammar(1));
    }

    #[test]
    fn the_budget_forces_the_end_marker() {
        let mut t = Thinking::new(spec(true, Some(2)));
        t.advance(1, "a");
        assert_eq!(t.forced(), None);
        t.advance(2, "b");
        assert_eq!(t.forced(), Some(8));
        assert!(!t.may_draft());
        t.advance(8, "</");
        assert_eq!(t.forced(), Some(9));
        t.advance(9, "think>");
        assert_eq!(t.forced(), None);
        assert!(t.grammar_on());
        assert_eq!(t.tokens(), 4);
    }

    #[test]
    fn a_zero_budget_forces_the_end_at_once() {
        let t = Thinking::new(spec(true, Some(0)));
        assert_eq!(t.forced(), Some(8));
    }

    #[test]
    fn the_end_marker_as_one_token_ends_the_section() {
        let mut s = spec(true, None);
        s.end_ids = vec![9];
        let mut t = Thinking::new(s);
        t.advance(9, "");
        assert!(t.grammar_on());
    }
}
