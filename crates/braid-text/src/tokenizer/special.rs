//! Special tokens written in the text (`<|im_start|>`, `<start_of_turn>`, Gemma's `<td>` or its
//! runs of newlines) are cut out before the vocabulary's own algorithm sees the text, because
//! that is what llama.cpp does: its `tokenizer_st_partition` splits the raw text on every
//! control, user-defined and unknown token, longest first, and tokenizes only what lies between.
//!
//! One leftmost-longest automaton over all of them gives the same cuts as llama.cpp's
//! token-by-token, longest-first search for every vocabulary these models ship (their special
//! texts do not overlap except as runs of one character, where both pick the longest run from
//! the left), and it stays linear in the text although Gemma has 6,400 such tokens.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

/// Either side of a cut: text for the vocabulary's algorithm, or one special token's id.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    Token(u32),
}

pub struct SpecialTokens {
    automaton: Option<AhoCorasick>,
    ids: Vec<u32>,
}

impl SpecialTokens {
    /// `tokens`: (text, id) of every token to cut out; empty texts are ignored.
    pub fn new(tokens: Vec<(String, u32)>) -> Result<Self, String> {
        let (texts, ids): (Vec<String>, Vec<u32>) =
            tokens.into_iter().filter(|(t, _)| !t.is_empty()).unzip();
        if texts.is_empty() {
            return Ok(Self {
                automaton: None,
                ids,
            });
        }
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&texts)
            .map_err(|e| format!("special tokens: {e}"))?;
        Ok(Self {
            automaton: Some(automaton),
            ids,
        })
    }

    pub fn split<'a>(&self, text: &'a str) -> Vec<Piece<'a>> {
        self.split_outside(text, &[])
    }

    /// Where the tokens are written in `text`.
    pub fn spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        self.automaton
            .iter()
            .flat_map(|a| a.find_iter(text))
            .map(|m| m.range())
            .collect()
    }

    /// As [`split`](Self::split), except that a token found exactly on one of `plain` (sorted
    /// spans) is left in the text around it.
    pub fn split_outside<'a>(
        &self,
        text: &'a str,
        plain: &[std::ops::Range<usize>],
    ) -> Vec<Piece<'a>> {
        let mut pieces = Vec::new();
        let mut start = 0;
        if let Some(automaton) = &self.automaton {
            for m in automaton.find_iter(text) {
                if plain
                    .binary_search_by(|p| p.start.cmp(&m.start()))
                    .is_ok_and(|i| plain[i] == m.range())
                {
                    continue;
                }
                if m.start() > start {
                    pieces.push(Piece::Text(&text[start..m.start()]));
                }
                pieces.push(Piece::Token(self.ids[m.pattern().as_usize()]));
                start = m.end();
            }
        }
        if start < text.len() {
            pieces.push(Piece::Text(&text[start..]));
        }
        pieces
    }
}
