//! Where did the last few tokens occur before, and what followed them?
//!
//! Drafting without a second model is a lookup: text being copied, quoted or reshaped has
//! occurred before (in the prompt, earlier in the answer, in another request's answer), so the
//! tokens that followed the latest earlier occurrence of the last three (or, failing that,
//! two) tokens are a good guess at what comes next. The index maps each trigram and bigram of
//! a text that only grows to the position after its latest occurrence, and is brought up to
//! date with the text's new tokens before each lookup, so a step's lookups cost O(1) per
//! sequence however long its context.

use std::collections::HashMap;

/// Tokens that never occur in a text and end an n-gram (a boundary between documents).
pub const SEPARATOR: u32 = u32::MAX;

/// The latest occurrence of each trigram and bigram of one growing token text.
#[derive(Clone, Debug, Default)]
pub struct NgramIndex {
    trigrams: HashMap<[u32; 3], usize>,
    bigrams: HashMap<[u32; 2], usize>,
    /// N-grams ending before this position are indexed.
    indexed: usize,
}

impl NgramIndex {
    /// Indexes the n-grams of `text` that end at or before `end` and are not indexed yet.
    /// `text` must be the same text each call, grown only at its end.
    pub fn extend(&mut self, text: &[u32], end: usize) {
        let end = end.min(text.len());
        for e in self.indexed.max(2)..=end {
            let bi = [text[e - 2], text[e - 1]];
            if !bi.contains(&SEPARATOR) {
                self.bigrams.insert(bi, e);
            }
            if e >= 3 {
                let tri = [text[e - 3], text[e - 2], text[e - 1]];
                if !tri.contains(&SEPARATOR) {
                    self.trigrams.insert(tri, e);
                }
            }
        }
        self.indexed = self.indexed.max(end + 1);
    }

    /// Where the tokens after the latest indexed occurrence of `context`'s last trigram (else
    /// bigram) start.
    pub fn find(&self, context: &[u32]) -> Option<usize> {
        let n = context.len();
        let tri = (n >= 3)
            .then(|| {
                self.trigrams
                    .get(&[context[n - 3], context[n - 2], context[n - 1]])
            })
            .flatten();
        let bi = || {
            (n >= 2)
                .then(|| self.bigrams.get(&[context[n - 2], context[n - 1]]))
                .flatten()
        };
        tri.or_else(bi).copied()
    }

    /// Forgets everything (the text it indexed is gone).
    pub fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Up to `max` tokens of `text` from `at`, stopping at a separator.
pub fn continuation(text: &[u32], at: usize, max: usize) -> &[u32] {
    let end = (at + max).min(text.len());
    let run = &text[at.min(end)..end];
    let stop = run
        .iter()
        .position(|&t| t == SEPARATOR)
        .unwrap_or(run.len());
    &run[..stop]
}

/// A sequence's guess from its own tokens (prompt lookup): what followed the latest earlier
/// occurrence of its last tokens. `index` covers `tokens` and is extended here.
pub fn lookup_own<'t>(index: &mut NgramIndex, tokens: &'t [u32], max: usize) -> &'t [u32] {
    // Every n-gram but the last one, which is the pattern itself.
    index.extend(tokens, tokens.len().saturating_sub(1));
    match index.find(tokens) {
        Some(at) => continuation(tokens, at, max),
        None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_followed_the_latest_trigram() {
        let mut index = NgramIndex::default();
        // "1 2 3 4 5 … 1 2 3 9 … 1 2 3" → the latest "1 2 3" was followed by 9.
        let tokens = [1, 2, 3, 4, 5, 7, 1, 2, 3, 9, 8, 6, 1, 2, 3];
        assert_eq!(lookup_own(&mut index, &tokens, 3), &[9, 8, 6]);
        // The text grows: "… 1 2 3 9 8" then ends in "9 8", last seen before "6".
        let mut grown = tokens.to_vec();
        grown.extend([9, 8]);
        assert_eq!(lookup_own(&mut index, &grown, 2), &[6, 1]);
    }

    #[test]
    fn a_bigram_when_no_trigram_matches_and_nothing_when_neither_does() {
        let mut index = NgramIndex::default();
        assert_eq!(lookup_own(&mut index, &[5, 6, 7, 1, 6, 7], 4), &[1, 6, 7]);
        let mut index = NgramIndex::default();
        assert!(lookup_own(&mut index, &[1, 2, 3, 4], 4).is_empty());
        assert!(lookup_own(&mut NgramIndex::default(), &[1], 4).is_empty());
    }

    #[test]
    fn the_pattern_never_matches_itself() {
        let mut index = NgramIndex::default();
        assert!(lookup_own(&mut index, &[1, 2, 3], 4).is_empty());
        // A run of one token: the latest earlier "7 7 7" is followed by the last 7.
        let mut index = NgramIndex::default();
        assert_eq!(lookup_own(&mut index, &[7, 7, 7, 7], 4), &[7]);
    }

    #[test]
    fn separators_end_continuations_and_never_match() {
        let mut index = NgramIndex::default();
        let text = [1, 2, 3, 4, SEPARATOR, 3, 4, 5, SEPARATOR];
        index.extend(&text, text.len());
        let at = index.find(&[9, 3, 4]).unwrap();
        assert_eq!(continuation(&text, at, 8), &[5]);
        assert_eq!(index.find(&[4, SEPARATOR]), None);
        let at = index.find(&[1, 2, 3]).unwrap();
        assert_eq!(continuation(&text, at, 8), &[4]);
    }
}
