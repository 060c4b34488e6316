//! Control tokens a user types stay text.
//!
//! A chat message that says `<|im_end|>\n<|im_start|>system\n…` must not become real role
//! tokens: the rendered template is one string, and tokenizing it reads every control token's
//! text as the token. So before the template is rendered, every control-token text inside a
//! message is wrapped in marks that nobody can type (private-use characters around a random
//! nonce); after rendering, [`Tokenizer::encode_marked`](super::Tokenizer::encode_marked)
//! removes the marks and reads what they enclosed as plain text, as llama.cpp does with
//! `parse_special = false` and Hugging Face with `split_special_tokens`. The template's own
//! markup is outside every mark and stays special. A template that drops part of a message
//! drops its marks too; a mark left without its partner is removed and changes nothing.

use std::hash::{BuildHasher, Hasher};
use std::ops::Range;

pub struct PlainMarks {
    open: String,
    close: String,
}

impl Default for PlainMarks {
    fn default() -> Self {
        Self::new()
    }
}

impl PlainMarks {
    /// Marks with a nonce of their own, so a message cannot forge them.
    pub fn new() -> Self {
        let nonce = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Self {
            open: format!("\u{E000}{nonce:016x}\u{E001}"),
            close: format!("\u{E001}{nonce:016x}\u{E000}"),
        }
    }

    /// `text` with each of `spans` (sorted, not overlapping) enclosed in marks.
    pub fn mark(&self, text: &str, spans: &[Range<usize>]) -> String {
        let mut out = String::with_capacity(text.len() + spans.len() * 40);
        let mut at = 0;
        for span in spans {
            out.push_str(&text[at..span.start]);
            out.push_str(&self.open);
            out.push_str(&text[span.clone()]);
            out.push_str(&self.close);
            at = span.end;
        }
        out.push_str(&text[at..]);
        out
    }

    /// `text` without its marks, and the spans of that text that were enclosed in a pair.
    pub fn unmark(&self, text: &str) -> (String, Vec<Range<usize>>) {
        let mut clean = String::with_capacity(text.len());
        let mut spans = Vec::new();
        let mut rest = text;
        let mut opened: Option<usize> = None;
        loop {
            let next_open = rest.find(&self.open);
            let next_close = rest.find(&self.close);
            let (at, is_open) = match (next_open, next_close) {
                (None, None) => break,
                (Some(o), Some(c)) if o < c => (o, true),
                (Some(o), None) => (o, true),
                (_, Some(c)) => (c, false),
            };
            clean.push_str(&rest[..at]);
            if is_open {
                opened = Some(clean.len());
                rest = &rest[at + self.open.len()..];
            } else {
                if let Some(start) = opened.take() {
                    spans.push(start..clean.len());
                }
                rest = &rest[at + self.close.len()..];
            }
        }
        clean.push_str(rest);
        (clean, spans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_come_off_and_leave_the_spans_they_enclosed() {
        let m = PlainMarks::new();
        let marked = m.mark("a<x>b<y>c", &[1..4, 5..8]);
        let rendered = format!("<s>{marked}</s>");
        let (clean, spans) = m.unmark(&rendered);
        assert_eq!(clean, "<s>a<x>b<y>c</s>");
        assert_eq!(spans, vec![4..7, 8..11]);
        // A template that dropped part of a message leaves half a pair, which is removed.
        let whole = 0..3;
        let marked = m.mark("<x>", std::slice::from_ref(&whole));
        let (clean, spans) = m.unmark(&format!("x{}y{marked}z", m.open));
        assert_eq!(
            (clean.as_str(), spans.as_slice()),
            ("xy<x>z", std::slice::from_ref(&(2..5)))
        );
        let (clean, spans) = m.unmark(&format!("x{}y", m.close));
        assert_eq!((clean.as_str(), spans), ("xy", vec![]));
        assert_ne!(
            PlainMarks::new().open,
            m.open,
            "each request's marks differ"
        );
    }
}
