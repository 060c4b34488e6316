//! SentencePiece vocabularies (`tokenizer.ggml.model = llama`, Gemma's): no merge list, only a
//! score per piece.
//!
//! This is llama.cpp's `llm_tokenizer_spm_session`, not a `tokenizers` BPE with merges derived
//! from the scores: llama.cpp repeatedly merges, among all adjacent symbol pairs whose
//! concatenation is any piece of the vocabulary, the one whose piece has the highest score
//! (the leftmost on a tie). A derived merge list would have to enumerate every split of all
//! 262,144 Gemma pieces at each load to express the same rule, and its ties would follow list
//! order instead of position. Doing the rule itself is short, exact and needs nothing at load.
//! A symbol left that is not a piece falls back to its bytes as `<0xXX>` pieces.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

pub struct Spm {
    scores: Vec<f32>,
    /// The `<0xXX>` piece of every byte, or the byte itself as a one-character piece.
    byte_ids: Vec<Option<u32>>,
    unk_id: Option<u32>,
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
    id: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// The heap's top: the highest score, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl Spm {
    pub fn new(vocab: &HashMap<String, u32>, scores: Vec<f32>, unk_id: Option<u32>) -> Self {
        let byte_ids = (0..=255u8)
            .map(|b| {
                vocab
                    .get(&format!("<0x{b:02X}>"))
                    .or_else(|| {
                        b.is_ascii()
                            .then(|| vocab.get(&(b as char).to_string()))
                            .flatten()
                    })
                    .copied()
            })
            .collect();
        Self {
            scores,
            byte_ids,
            unk_id,
        }
    }

    /// Ids of `text`, whose spaces the caller has already escaped as `▁`.
    pub fn encode(&self, vocab: &HashMap<String, u32>, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (start, c) in text.char_indices() {
            let i = symbols.len();
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: (start + c.len_utf8() < text.len()).then_some(i + 1),
            });
        }
        if symbols.is_empty() {
            return;
        }
        let mut queue = BinaryHeap::new();
        let bigram = |symbols: &[Symbol], left: usize, right: usize| {
            let (l, r) = (symbols[left], symbols[right]);
            let piece = &text[l.start..r.start + r.len];
            let id = *vocab.get(piece)?;
            Some(Bigram {
                score: self.scores.get(id as usize).copied().unwrap_or(0.0),
                left,
                right,
                size: piece.len(),
                id,
            })
        };
        for i in 1..symbols.len() {
            queue.extend(bigram(&symbols, i - 1, i));
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // A pair one of whose symbols has since grown (or vanished) is stale.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            debug_assert!(vocab.get(&text[l.start..l.start + b.size]) == Some(&b.id));
            symbols[b.left].len += r.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            if let Some(p) = l.prev {
                queue.extend(bigram(&symbols, p, b.left));
            }
            if let Some(n) = r.next {
                queue.extend(bigram(&symbols, b.left, n));
            }
        }
        let mut i = Some(0);
        while let Some(s) = i {
            let sym = symbols[s];
            let piece = &text[sym.start..sym.start + sym.len];
            match vocab.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        out.extend(self.byte_ids[b as usize].or(self.unk_id));
                    }
                }
            }
            i = sym.next;
        }
    }
}
