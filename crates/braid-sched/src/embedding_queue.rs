//! Texts waiting for the embedding model, and which of them the next step embeds.
//!
//! An embedding request is many texts, all read at once and none generated, so it is a
//! prompt without a sequence: no KV blocks, nothing after its step. The embedding model reads
//! a step's texts as one forward with their rows stacked, unpadded (braid-embedding's
//! `bert_encoder.rs`), so a step's texts are one batch and its cost is their tokens. Texts
//! are taken oldest first (a request's texts in order, requests in arrival order), as many as
//! the step has room for, so a text's wait depends on what came before it, never on its
//! length.

use std::collections::VecDeque;

/// Which request a text belongs to (the engine's id for it).
pub type EmbedRequestId = u64;

/// One text to embed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbedText {
    pub request: EmbedRequestId,
    /// Its place among the request's inputs.
    pub index: usize,
    pub tokens: usize,
    /// When its request arrived (the scheduler's clock, seconds).
    pub arrival: f64,
}

/// Texts embedded by one forward of the embedding model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EmbeddingBatch {
    pub texts: Vec<EmbedText>,
}

impl EmbeddingBatch {
    /// Tokens the forward computes: the texts' own, as nothing is padded.
    pub fn tokens(&self) -> usize {
        self.texts.iter().map(|t| t.tokens).sum()
    }
}

/// Most texts one step takes, however cheap: bounds a step's length when nothing else does.
pub const MAX_STEP_TEXTS: usize = 512;

#[derive(Clone, Debug, Default)]
pub struct EmbeddingQueue {
    waiting: VecDeque<EmbedText>,
}

impl EmbeddingQueue {
    pub fn push(&mut self, text: EmbedText) {
        debug_assert!(
            text.tokens > 0,
            "an empty text is refused before it is queued"
        );
        self.waiting.push_back(text);
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// When the oldest waiting text's request arrived.
    pub fn oldest_arrival(&self) -> Option<f64> {
        self.waiting.front().map(|t| t.arrival)
    }

    /// Forgets a request's waiting texts (its client left, or a step failed); how many.
    pub fn remove_request(&mut self, request: EmbedRequestId) -> usize {
        let before = self.waiting.len();
        self.waiting.retain(|t| t.request != request);
        before - self.waiting.len()
    }

    /// Forgets every waiting text.
    pub fn clear(&mut self) {
        self.waiting.clear();
    }

    /// Takes the longest run of oldest texts whose tokens `fit`, as one batch (none if no
    /// text is taken); at least the oldest text when `at_least_one`. `fit` must be monotone:
    /// if a count of tokens fits, every smaller count does.
    pub fn take(
        &mut self,
        fit: impl Fn(usize) -> bool,
        at_least_one: bool,
    ) -> Option<EmbeddingBatch> {
        let (mut take, mut tokens) = (0, 0);
        for t in self.waiting.iter().take(MAX_STEP_TEXTS) {
            if !fit(tokens + t.tokens) {
                break;
            }
            take += 1;
            tokens += t.tokens;
        }
        if take == 0 && at_least_one {
            take = self.waiting.len().min(1);
        }
        (take > 0).then(|| EmbeddingBatch {
            texts: self.waiting.drain(..take).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(request: u64, index: usize, tokens: usize) -> EmbedText {
        EmbedText {
            request,
            index,
            tokens,
            arrival: request as f64,
        }
    }

    #[test]
    fn a_step_takes_at_most_its_bound_however_cheap() {
        let mut q = EmbeddingQueue::default();
        (0..600).for_each(|i| q.push(text(1, i, 10)));
        let batch = q.take(|_| true, false).unwrap();
        assert_eq!(batch.texts.len(), MAX_STEP_TEXTS);
        assert_eq!(batch.tokens(), MAX_STEP_TEXTS * 10);
        assert_eq!(q.len(), 600 - MAX_STEP_TEXTS);
    }

    #[test]
    fn takes_the_oldest_texts_that_fit() {
        let mut q = EmbeddingQueue::default();
        for r in 0..3 {
            for i in 0..10 {
                q.push(text(r, i, 20));
            }
        }
        // 25 texts of 20 tokens fit 500.
        let batch = q.take(|tokens| tokens <= 500, false).unwrap();
        let taken: Vec<(u64, usize)> = batch.texts.iter().map(|t| (t.request, t.index)).collect();
        assert_eq!(taken.len(), 25);
        assert!(taken.iter().all(|&(r, i)| r < 2 || i < 5));
        assert_eq!(q.len(), 5);
        assert_eq!(q.oldest_arrival(), Some(2.0));
    }

    #[test]
    fn nothing_fits_but_the_oldest_may_be_forced() {
        let mut q = EmbeddingQueue::default();
        q.push(text(0, 0, 100));
        q.push(text(1, 0, 5));
        assert_eq!(q.take(|p| p <= 50, false), None);
        let forced = q.take(|p| p <= 50, true).unwrap();
        assert_eq!(forced.texts, vec![text(0, 0, 100)]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_request_that_leaves_takes_its_texts() {
        let mut q = EmbeddingQueue::default();
        for r in 0..3 {
            q.push(text(r, 0, 4));
            q.push(text(r, 1, 4));
        }
        assert_eq!(q.remove_request(1), 2);
        assert_eq!(q.len(), 4);
        assert_eq!(q.remove_request(1), 0);
    }
}
