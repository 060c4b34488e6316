//! Guessing each decoding sequence's next tokens, for the step to verify beside its decode.
//!
//! Speculative decoding without a second model. The guesses come from text the answer is
//! likely to repeat, in this order:
//! 1. the request's `prediction` (OpenAI's Predicted Outputs): the answer is expected to be
//!    that text, so the draft is whatever of it follows the point the answer has reached;
//! 2. the request's own prompt and answer (prompt lookup): what followed the latest earlier
//!    occurrence of its last tokens;
//! 3. recent answers to other requests (suffix decoding): agents and templates repeat
//!    themselves across requests.
//!
//! A guess costs nothing to be wrong but a row: the scheduler decides how many of its tokens
//! the step verifies (`braid-sched`'s `planner_drafts.rs`), and sampling every verified row in
//! order with the request's own sampler makes the answer exactly what plain decoding gives.

use braid_sched::ngram_index::{continuation, lookup_own, SEPARATOR};
use braid_sched::{DraftSource, NgramIndex};

/// Speculative decoding's settings (`--speculative`, `--num-speculative-tokens`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Speculation {
    /// Draft from the request's own tokens and from recent answers; a request's
    /// `prediction` drafts whatever this says.
    pub ngram: bool,
    /// Most tokens one draft offers.
    pub max_tokens: usize,
}

impl Default for Speculation {
    fn default() -> Self {
        Self {
            ngram: true,
            max_tokens: 8,
        }
    }
}

/// A request's predicted answer, and how far the answer has followed it.
#[derive(Clone, Debug)]
pub struct Prediction {
    tokens: Vec<u32>,
    /// The prediction's token the answer is expected to produce next; `None` after the answer
    /// left the prediction, until it joins it again.
    at: Option<usize>,
    /// Where the answer last followed it (it rejoins at or after this).
    last_at: usize,
    /// Answer tokens already followed.
    followed: usize,
    /// Drafted prediction tokens the model accepted.
    pub accepted: usize,
}

impl Prediction {
    pub fn new(tokens: Vec<u32>) -> Self {
        Self {
            tokens,
            at: Some(0),
            last_at: 0,
            followed: 0,
            accepted: 0,
        }
    }

    /// OpenAI's `rejected_prediction_tokens`: the prediction's tokens the answer did not use.
    pub fn rejected(&self) -> usize {
        self.tokens.len().saturating_sub(self.accepted)
    }

    /// Moves along the prediction with the answer's new tokens: an answer token equal to the
    /// expected one advances; any other leaves the prediction, and the answer rejoins it where
    /// its last three tokens next occur in it.
    fn follow(&mut self, answer: &[u32]) {
        for i in self.followed..answer.len() {
            let token = answer[i];
            self.at = match self.at {
                Some(at) if self.tokens.get(at) == Some(&token) => Some(at + 1),
                _ => self.rejoin(&answer[..=i]),
            };
            if let Some(at) = self.at {
                self.last_at = at;
            }
        }
        self.followed = answer.len();
    }

    fn rejoin(&self, answer: &[u32]) -> Option<usize> {
        let tail = answer.get(answer.len().checked_sub(3)?..)?;
        let from = self.last_at.saturating_sub(3);
        let found = |start: usize| {
            self.tokens
                .get(start..)?
                .windows(3)
                .position(|w| w == tail)
                .map(|p| start + p + 3)
        };
        found(from).or_else(|| found(0))
    }

    fn draft(&mut self, answer: &[u32], max: usize) -> &[u32] {
        self.follow(answer);
        match self.at {
            Some(at) => &self.tokens[at.min(self.tokens.len())..(at + max).min(self.tokens.len())],
            None => &[],
        }
    }
}

/// One request's draft sources.
#[derive(Debug, Default)]
pub struct SequenceDrafter {
    own: NgramIndex,
    pub prediction: Option<Prediction>,
    /// The source of the draft last handed to the scheduler.
    pub source: Option<DraftSource>,
}

impl SequenceDrafter {
    pub fn new(prediction: Option<Vec<u32>>) -> Self {
        Self {
            prediction: prediction.map(Prediction::new),
            ..Self::default()
        }
    }

    /// The next draft for a sequence whose tokens (prompt then answer) are `tokens`, and where
    /// it came from.
    pub fn draft(
        &mut self,
        tokens: &[u32],
        prompt_len: usize,
        recent: &RecentAnswers,
        spec: Speculation,
    ) -> (Vec<u32>, DraftSource) {
        let answer = &tokens[prompt_len.min(tokens.len())..];
        let found = |draft: &[u32], source| (!draft.is_empty()).then(|| (draft.to_vec(), source));
        let guess = self
            .prediction
            .as_mut()
            .and_then(|p| found(p.draft(answer, spec.max_tokens), DraftSource::Prediction))
            .or_else(|| {
                spec.ngram
                    .then(|| {
                        found(
                            lookup_own(&mut self.own, tokens, spec.max_tokens),
                            DraftSource::Own,
                        )
                    })
                    .flatten()
            })
            .or_else(|| {
                spec.ngram
                    .then(|| found(recent.lookup(tokens, spec.max_tokens), DraftSource::Recent))
                    .flatten()
            });
        self.source = guess.as_ref().map(|g| g.1);
        guess.unwrap_or((Vec::new(), DraftSource::Own))
    }

    /// The step verified `drafted` tokens of the last draft and accepted `accepted`.
    pub fn verified(&mut self, accepted: usize) {
        if self.source == Some(DraftSource::Prediction) {
            if let Some(p) = self.prediction.as_mut() {
                p.accepted += accepted;
            }
        }
    }
}

/// Recent answers to every request, bounded: when full, the older half is forgotten.
#[derive(Debug)]
pub struct RecentAnswers {
    text: Vec<u32>,
    index: NgramIndex,
    capacity: usize,
}

impl RecentAnswers {
    /// Keeps at most `capacity` tokens of answers.
    pub fn new(capacity: usize) -> Self {
        Self {
            text: Vec::new(),
            index: NgramIndex::default(),
            capacity,
        }
    }

    /// Remembers a finished request's answer.
    pub fn add(&mut self, answer: &[u32]) {
        if answer.len() < 3 || answer.len() >= self.capacity {
            return;
        }
        let needed = (self.text.len() + answer.len() + 1).saturating_sub(self.capacity);
        if needed > 0 {
            // At least half, and whole answers: cut at the first answer boundary past both.
            let target = needed.max(self.text.len() / 2);
            let cut = (target..self.text.len())
                .find(|&b| self.text[b - 1] == SEPARATOR)
                .unwrap_or(self.text.len());
            self.text.drain(..cut);
            self.index.clear();
        }
        self.text.extend_from_slice(answer);
        self.text.push(SEPARATOR);
        self.index.extend(&self.text, self.text.len());
    }

    /// What followed the latest occurrence of `context`'s last tokens in a recent answer.
    pub fn lookup(&self, context: &[u32], max: usize) -> &[u32] {
        match self.index.find(context) {
            Some(at) => continuation(&self.text, at, max),
            None => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: Speculation = Speculation {
        ngram: true,
        max_tokens: 4,
    };

    #[test]
    fn a_prediction_is_drafted_from_where_the_answer_is() {
        let mut d = SequenceDrafter::new(Some(vec![10, 11, 12, 13, 14, 15, 16]));
        let recent = RecentAnswers::new(100);
        let prediction = |v: Vec<u32>| (v, DraftSource::Prediction);
        assert_eq!(
            d.draft(&[1, 2], 2, &recent, SPEC),
            prediction(vec![10, 11, 12, 13])
        );
        d.verified(2);
        assert_eq!(
            d.draft(&[1, 2, 10, 11, 12], 2, &recent, SPEC),
            prediction(vec![13, 14, 15, 16])
        );
        // The answer leaves the prediction (99), then rejoins it at "13 14 15".
        let left = [1, 2, 10, 11, 12, 99];
        assert_ne!(d.draft(&left, 2, &recent, SPEC).1, DraftSource::Prediction);
        let rejoined = [1, 2, 10, 11, 12, 99, 13, 14, 15];
        assert_eq!(d.draft(&rejoined, 2, &recent, SPEC), prediction(vec![16]));
        let p = d.prediction.as_ref().unwrap();
        assert_eq!((p.accepted, p.rejected()), (2, 5));
    }

    #[test]
    fn own_tokens_then_recent_answers() {
        let mut recent = RecentAnswers::new(100);
        recent.add(&[7, 8, 9, 20, 21]);
        let mut d = SequenceDrafter::new(None);
        assert_eq!(
            d.draft(&[1, 2, 3, 4, 1, 2, 3], 0, &recent, SPEC),
            (vec![4, 1, 2, 3], DraftSource::Own)
        );
        let mut d = SequenceDrafter::new(None);
        assert_eq!(
            d.draft(&[5, 7, 8, 9], 0, &recent, SPEC),
            (vec![20, 21], DraftSource::Recent)
        );
        let off = Speculation {
            ngram: false,
            ..SPEC
        };
        assert!(SequenceDrafter::new(None)
            .draft(&[1, 2, 3, 1, 2, 3], 0, &recent, off)
            .0
            .is_empty());
    }

    #[test]
    fn recent_answers_forget_the_older_half_when_full() {
        let mut recent = RecentAnswers::new(12);
        recent.add(&[1, 2, 3, 4]);
        recent.add(&[5, 6, 7, 8]);
        assert_eq!(recent.lookup(&[1, 2], 4), &[3, 4]);
        recent.add(&[9, 10, 11, 12]);
        assert!(
            recent.lookup(&[1, 2], 4).is_empty(),
            "the oldest answer went"
        );
        assert_eq!(recent.lookup(&[5, 6, 7], 4), &[8]);
        assert_eq!(recent.lookup(&[10, 11], 4), &[12]);
    }
}
