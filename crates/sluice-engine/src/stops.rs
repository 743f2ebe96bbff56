//! Stop strings over the decoded text: matched across token boundaries, never returned,
//! and no prefix of one is streamed before it is known not to complete
//! (docs/ARCHITECTURE.md, "Stopping").

/// Text produced so far by one sequence and how much of it has been released.
#[derive(Clone, Debug, Default)]
pub struct StopText {
    text: String,
    released: usize,
}

/// The result of adding text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// Text safe to emit now (possibly empty).
    Text(String),
    /// A stop string matched: emit this final text, then stop.
    Stopped(String),
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl StopText {
    /// After `push` returned `Stopped`: the stop string that matched (the longest of those
    /// starting where the released text ends).
    pub fn matched<'a>(&self, stops: &'a [String]) -> Option<&'a String> {
        let rest = &self.text[self.released..];
        stops
            .iter()
            .filter(|s| !s.is_empty() && rest.starts_with(s.as_str()))
            .max_by_key(|s| s.len())
    }

    /// Appends `delta`, checks `stops`, and returns what may be released.
    pub fn push(&mut self, delta: &str, stops: &[String]) -> Release {
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        // A new match must end inside the new text, so it starts at most `longest - 1`
        // bytes before it.
        let search_from = floor_boundary(
            &self.text,
            self.text.len().saturating_sub(longest.saturating_sub(1)),
        );
        self.text.push_str(delta);
        let first = stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| {
                self.text[search_from..]
                    .find(s.as_str())
                    .map(|p| search_from + p)
            })
            .min();
        if let Some(end) = first {
            let end = end.max(self.released);
            let out = self.text[self.released..end].to_string();
            self.released = end;
            return Release::Stopped(out);
        }
        // Hold back the longest tail that is a prefix of some stop string.
        let mut hold = 0;
        for s in stops {
            for k in (1..s.len().min(self.text.len() - self.released + 1)).rev() {
                let tail_start = self.text.len() - k;
                if k > hold
                    && self.text.is_char_boundary(tail_start)
                    && s.is_char_boundary(k)
                    && s.as_bytes()
                        .starts_with(&self.text.as_bytes()[tail_start..])
                {
                    hold = k;
                    break;
                }
            }
        }
        let end = self.text.len() - hold;
        let out = self.text[self.released..end].to_string();
        self.released = end;
        Release::Text(out)
    }

    /// Releases everything held back (the sequence ended for another reason).
    pub fn flush(&mut self) -> String {
        let out = self.text[self.released..].to_string();
        self.released = self.text.len();
        out
    }
}

/// Byte index of the earliest occurrence of any of `stops` in `text`.
pub(crate) fn first_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter_map(|s| text.find(s.as_str())).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(deltas: &[&str], stops: &[&str]) -> (Vec<String>, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut st = StopText::default();
        let mut out = Vec::new();
        for d in deltas {
            match st.push(d, &stops) {
                Release::Text(t) => out.push(t),
                Release::Stopped(t) => {
                    out.push(t);
                    return (out, true);
                }
            }
        }
        out.push(st.flush());
        (out, false)
    }

    #[test]
    fn the_matched_stop_string_is_named() {
        let stops: Vec<String> = ["END", "ND!", "X"].iter().map(|s| s.to_string()).collect();
        let mut st = StopText::default();
        assert_eq!(st.push("abc E", &stops), Release::Text("abc ".into()));
        assert_eq!(st.push("ND! more", &stops), Release::Stopped("".into()));
        assert_eq!(st.matched(&stops).map(String::as_str), Some("END"));
    }

    #[test]
    fn stop_across_token_boundaries_is_cut_and_never_leaked() {
        let (out, stopped) = run(&["Hello", " wor", "ld", "!!"], &["world"]);
        assert!(stopped);
        assert_eq!(out, vec!["Hello", " ", ""]);
        assert_eq!(out.concat(), "Hello ");
    }

    #[test]
    fn a_prefix_that_does_not_complete_is_released_later() {
        let (out, stopped) = run(&["a wo", "nder"], &["world"]);
        assert!(!stopped);
        assert_eq!(out, vec!["a ", "wonder", ""]);
    }

    #[test]
    fn earliest_stop_wins_and_flush_releases_the_rest() {
        let (out, stopped) = run(&["xx END yy STOP"], &["STOP", "END"]);
        assert!(stopped);
        assert_eq!(out.concat(), "xx ");
        let (out, stopped) = run(&["ab", "c"], &["cd"]);
        assert!(!stopped);
        assert_eq!(out.concat(), "abc");
    }

    #[test]
    fn multibyte_text_is_split_on_char_boundaries() {
        let (out, stopped) = run(&["日本", "語です"], &["語で"]);
        assert!(stopped);
        assert_eq!(out.concat(), "日本");
        let (out, _) = run(&["日本", "語"], &["本x"]);
        assert_eq!(out.concat(), "日本語");
    }
}
