//! Texts waiting for the embedding model, and which of them the next step embeds.
//!
//! An embedding request is many texts, all read at once and none generated, so it is a
//! prompt without a sequence: no KV blocks, nothing after its step. Its cost is the embedding
//! model's forward over padded batches, so what matters is which texts share a batch. Texts
//! are taken oldest first (a request's texts in order, requests in arrival order), as many as
//! the step has room for, and the taken ones are grouped by length: sorted, and cut where the
//! next text would pad the batch's shortest by more than a quarter (plus a few tokens). A
//! bulk job of mixed lengths thus runs as a few batches of near-equal lengths, and a text's
//! wait depends on what came before it, never on its length.

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

/// Texts embedded by one forward of the embedding model, each padded to the longest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EmbeddingBatch {
    pub texts: Vec<EmbedText>,
}

impl EmbeddingBatch {
    pub fn padded_len(&self) -> usize {
        self.texts.iter().map(|t| t.tokens).max().unwrap_or(0)
    }

    /// Tokens the forward computes, padding included.
    pub fn padded_tokens(&self) -> usize {
        self.texts.len() * self.padded_len()
    }
}

/// Most texts one batch holds: the attention mask and scores grow with rows × length².
pub const MAX_BATCH_TEXTS: usize = 64;
/// Most texts one step takes, however cheap: bounds the grouping's sort and a step's length
/// when nothing else limits it.
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

    /// Takes the longest run of oldest texts whose batches' padded tokens `fit`, grouped by
    /// length; at least the oldest text when `at_least_one`. `fit` must be monotone: if a
    /// count of padded tokens fits, every smaller count does.
    pub fn take(&mut self, fit: impl Fn(usize) -> bool, at_least_one: bool) -> Vec<EmbeddingBatch> {
        let most = self.waiting.len().min(MAX_STEP_TEXTS);
        let cost = |n: usize| -> usize {
            group(self.waiting.iter().take(n).copied().collect())
                .iter()
                .map(EmbeddingBatch::padded_tokens)
                .sum()
        };
        // Padded tokens grow with the count taken (a text never shrinks the batch it joins,
        // and a new batch adds its own), so the longest run that fits is found by bisection.
        let (mut lo, mut hi) = (0, most);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fit(cost(mid)) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let take = if lo == 0 && at_least_one {
            most.min(1)
        } else {
            lo
        };
        group(self.waiting.drain(..take).collect())
    }
}

/// Groups texts into batches of near-equal length (see the module docs).
pub fn group(mut texts: Vec<EmbedText>) -> Vec<EmbeddingBatch> {
    texts.sort_by_key(|t| t.tokens);
    let mut batches: Vec<EmbeddingBatch> = Vec::new();
    for t in texts {
        match batches.last_mut() {
            Some(b)
                if b.texts.len() < MAX_BATCH_TEXTS
                    && t.tokens <= b.texts[0].tokens + b.texts[0].tokens / 4 + 8 =>
            {
                b.texts.push(t)
            }
            _ => batches.push(EmbeddingBatch { texts: vec![t] }),
        }
    }
    batches
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
    fn groups_near_equal_lengths_and_pads_little() {
        let lengths = [200, 9, 12, 210, 10, 60, 11, 64, 250];
        let texts = lengths
            .iter()
            .enumerate()
            .map(|(i, &n)| text(1, i, n))
            .collect();
        let batches = group(texts);
        let lens: Vec<Vec<usize>> = batches
            .iter()
            .map(|b| b.texts.iter().map(|t| t.tokens).collect())
            .collect();
        assert_eq!(
            lens,
            vec![vec![9, 10, 11, 12], vec![60, 64], vec![200, 210, 250]]
        );
        let real: usize = lengths.iter().sum();
        let padded: usize = batches.iter().map(|b| b.padded_tokens()).sum();
        // One batch of all nine would compute 9 × 250 = 2,250 tokens.
        assert!(padded <= real * 5 / 4, "{padded} padded for {real}");
    }

    #[test]
    fn a_batch_holds_at_most_its_bound() {
        let batches = group((0..150).map(|i| text(1, i, 10)).collect());
        assert_eq!(
            batches.iter().map(|b| b.texts.len()).collect::<Vec<_>>(),
            vec![64, 64, 22]
        );
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
        let batches = q.take(|padded| padded <= 500, false);
        let taken: Vec<(u64, usize)> = batches
            .iter()
            .flat_map(|b| b.texts.iter().map(|t| (t.request, t.index)))
            .collect();
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
        assert!(q.take(|p| p <= 50, false).is_empty());
        let forced = q.take(|p| p <= 50, true);
        assert_eq!(forced.len(), 1);
        assert_eq!(forced[0].texts, vec![text(0, 0, 100)]);
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
