//! Splitting text on special tokens before the vocabulary's own algorithm runs, as
//! llama.cpp's `tokenizer_st_partition` does: longest special text first, every
//! occurrence, optional stripping of whitespace beside a token.

/// A token that is matched in text as a whole before tokenisation.
#[derive(Clone, Debug)]
pub struct Special {
    /// Its id.
    pub id: u32,
    /// Its text.
    pub text: String,
    /// Control or unknown token: only matched when special tokens are parsed.
    /// (User-defined tokens are always matched.)
    pub control: bool,
    /// Whitespace to its left is dropped.
    pub lstrip: bool,
    /// Whitespace to its right is dropped.
    pub rstrip: bool,
}

/// A piece of the input: text still to tokenise, or a special token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment<'a> {
    /// Raw text.
    Text(&'a str),
    /// A special token's id.
    Token(u32),
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Splits `text` on `specials` (sorted longest first).
pub fn partition<'a>(
    text: &'a str,
    specials: &[Special],
    parse_special: bool,
) -> Vec<Fragment<'a>> {
    let mut frags = vec![Fragment::Text(text)];
    if text.is_empty() {
        return Vec::new();
    }
    for sp in specials {
        if sp.text.is_empty() || (sp.control && !parse_special) {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len());
        for f in frags {
            let Fragment::Text(mut rest) = f else {
                next.push(f);
                continue;
            };
            while let Some(at) = rest.find(sp.text.as_str()) {
                let mut left = &rest[..at];
                if sp.lstrip {
                    left = left.trim_end_matches(|c: char| c.is_ascii() && is_space(c as u8));
                }
                if !left.is_empty() {
                    next.push(Fragment::Text(left));
                }
                next.push(Fragment::Token(sp.id));
                rest = &rest[at + sp.text.len()..];
                if sp.rstrip {
                    rest = rest.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8));
                }
            }
            if !rest.is_empty() {
                next.push(Fragment::Text(rest));
            }
        }
        frags = next;
    }
    frags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(id: u32, text: &str, control: bool, rstrip: bool) -> Special {
        Special {
            id,
            text: text.into(),
            control,
            lstrip: false,
            rstrip,
        }
    }

    #[test]
    fn longest_first_and_control_tokens_only_when_parsing() {
        let specials = [
            sp(1, "<end_of_turn>", true, false),
            sp(2, "<end>", false, true),
        ];
        use Fragment::*;
        assert_eq!(
            partition("a<end_of_turn>b<end>  c", &specials, true),
            [Text("a"), Token(1), Text("b"), Token(2), Text("c")]
        );
        assert_eq!(
            partition("a<end_of_turn>b", &specials, false),
            [Text("a<end_of_turn>b")]
        );
        assert_eq!(partition("", &specials, true), []);
    }
}
