//! How likely a sequence's next drafted token is to be right, from how its drafts fared.
//!
//! The planner drafts only where the expected tokens pay for the rows (`planner_drafts.rs`), so
//! it needs, per sequence, the chance that a drafted token is accepted given that the ones
//! before it were. A draft is verified left to right and stops at the first miss, so a draft
//! of `d` tokens of which `m` were accepted is `m` successes out of `min(m + 1, d)` trials.
//! Recent drafts weigh more (a copied paragraph ends and free text follows). A sequence with no
//! history of its own starts from the server's recent drafts from the same source (the
//! scheduler keeps one estimate per [`DraftSource`] over every sequence's drafts: a
//! request's prediction is right far more often than a bigram seen once), which start at an
//! even chance.
//!
//! An estimate too low to draft would never see another draft and stay low for good, though
//! the text may turn to copying. So each step a sequence had a draft but verified none of it,
//! its evidence fades a little (`forget`) and its estimate drifts back to the prior, until a
//! short draft is tried again: on text nothing predicts, one drafted row every twenty-odd
//! steps.

/// Weight kept by the earlier history at each verified draft.
const DECAY: f64 = 0.85;
/// Weight kept at each step with a draft not verified.
const IDLE_DECAY: f64 = 0.95;
/// Trials the prior counts for.
const PRIOR_TRIALS: f64 = 2.0;

/// Where a draft came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DraftSource {
    /// The request's `prediction` (OpenAI's Predicted Outputs).
    Prediction,
    /// The sequence's own prompt and answer (prompt lookup).
    #[default]
    Own,
    /// Recent answers to other requests (suffix decoding).
    Recent,
    /// A smaller model with the same vocabulary (`--draft-model`), run after the plan: its
    /// draft is planned by length and its tokens written in before the step's forward.
    Model,
}

impl DraftSource {
    pub const COUNT: usize = 4;

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Decayed counts of one sequence's drafted tokens tried and accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DraftAcceptance {
    successes: f64,
    trials: f64,
}

impl DraftAcceptance {
    /// The chance that a drafted token is accepted, given that those before it were.
    pub fn rate(&self) -> f64 {
        self.rate_from(0.5)
    }

    /// [`rate`](Self::rate), starting from `prior` rather than an even chance.
    pub fn rate_from(&self, prior: f64) -> f64 {
        (self.successes + prior * PRIOR_TRIALS) / (self.trials + PRIOR_TRIALS)
    }

    /// A step had a draft for it but verified none: the evidence fades toward the prior.
    pub fn forget(&mut self) {
        self.successes *= IDLE_DECAY;
        self.trials *= IDLE_DECAY;
    }

    /// Records a draft of `drafted` tokens whose first `accepted` were right.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        debug_assert!(accepted <= drafted);
        let trials = (accepted + 1).min(drafted);
        self.successes = self.successes * DECAY + accepted as f64;
        self.trials = self.trials * DECAY + trials as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_even_and_follows_the_drafts() {
        let mut a = DraftAcceptance::default();
        assert_eq!(a.rate(), 0.5);
        for _ in 0..10 {
            a.observe(4, 4);
        }
        assert!(a.rate() > 0.9, "{}", a.rate());
        for _ in 0..20 {
            a.observe(2, 0);
        }
        assert!(a.rate() < 0.2, "{}", a.rate());
        let before = a;
        a.observe(0, 0);
        assert_eq!(a, before, "no draft, no evidence");
    }

    #[test]
    fn an_estimate_too_low_to_draft_returns_to_the_prior() {
        let mut a = DraftAcceptance::default();
        for _ in 0..30 {
            a.observe(1, 0);
        }
        assert!(a.rate() < 0.15);
        for _ in 0..60 {
            a.forget();
        }
        assert!(a.rate() > 0.4, "{}", a.rate());
    }

    #[test]
    fn the_prior_counts_for_two_trials() {
        let mut a = DraftAcceptance::default();
        assert_eq!(a.rate_from(0.9), 0.9);
        a.observe(1, 0);
        assert!((a.rate_from(0.9) - 1.8 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_draft_stops_at_its_first_miss() {
        let mut a = DraftAcceptance::default();
        a.observe(8, 2);
        // Two hits, one miss: the five tokens after the miss were never tried.
        assert_eq!(a.rate(), (2.0 + 1.0) / (3.0 + 2.0));
    }
}
