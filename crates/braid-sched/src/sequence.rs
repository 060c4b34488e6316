//! One request's life as the planner sees it.
//!
//! A sequence is a token list plus a cursor: `num_computed` says how many of those tokens
//! already have K/V in the cache. Everything the planner does is moving that cursor
//! forward (prefill: many tokens at once, decode: one) or back to zero (preemption), so a
//! prompt being read, an answer being written and a preempted stream being recomputed are
//! the same operation on different slices. That is why a preempted sequence loses nothing:
//! its generated tokens stay in `tokens`, and recomputing them is just reading a longer
//! prompt.
//!
//! ```text
//!  Waiting ──admit──▶ Prefilling ──prompt read, token sampled──▶ Decoding
//!     ▲                   │                                        │
//!     └──── Preempted ◀───┴────────── blocks ran out ──────────────┘
//!  any state ──abort──▶ Cancelled        Decoding ──commit: stop rule──▶ Finished
//! ```
//!
//! **When a sequence ends** is decided here and nowhere else, when a sampled token is
//! committed ([`Sequence::finish_reason`]): a stop token ends it with `Stop` (the token is not
//! output), reaching `max_new_tokens` or the end of the context with `Length`. The server
//! only adds what needs text (stop strings) or a clock (its deadline), and those end a
//! sequence from outside a step (`Scheduler::abort`, as a client that leaves does; the engine
//! reports the request finished or cancelled, the scheduler need not know which).
//!
//! Invariants while a sequence is held by the scheduler:
//! - `num_computed <= tokens.len()`; while Decoding, `tokens.len() == num_computed + 1`
//!   (the last sampled token is the next one to feed).
//! - `block_table` covers at least `num_computed` positions; it is empty when Waiting or
//!   Preempted.
//! - `num_generated() <= max_new_tokens`: the planner never schedules a step that could
//!   sample past the limit, and `Scheduler::commit` removes a sequence as soon as it ends.
//! - With prefix caching, the first `num_cached_blocks` entries of `block_table` are full,
//!   computed and registered in (or found in) the prefix cache; they may be shared with other
//!   sequences and are never written again.

use crate::block_allocator::BlockId;
use crate::draft_acceptance::{DraftAcceptance, DraftSource};
use crate::prefix_cache::BlockHash;

/// Caller-chosen request id.
pub type SeqId = u64;

/// Where a sequence is in its life. `Finished` and `Cancelled` are terminal: the scheduler
/// drops the sequence when it reaches them, so they are only seen by whoever kept a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SeqState {
    /// Queued, never admitted; holds no blocks.
    Waiting,
    /// Admitted; its prompt (or, after preemption, prompt + generated tokens) is being read.
    Prefilling,
    /// Prompt read; generates one token per step.
    Decoding,
    /// Ended by its stop rule (stop token, token limit, end of the context).
    Finished,
    /// Ended from outside a step (`Scheduler::abort`).
    Cancelled,
    /// Lost its blocks to an older sequence; back at the front of the queue, to be recomputed.
    Preempted,
}

/// Why a request finished (a client leaving is not a finish).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// A stop token was sampled (or, decided by the server, a stop string matched).
    Stop,
    /// `max_new_tokens` reached, or the context is full.
    Length,
}

impl FinishReason {
    /// OpenAI's `finish_reason` value.
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// What ends a sequence besides the end of the context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopConditions {
    pub max_new_tokens: usize,
    /// Sampling one of these ends it with `Stop`; the token is not part of the output. Empty
    /// with `ignore_eos`.
    pub stop_token_ids: Vec<u32>,
}

impl From<usize> for StopConditions {
    /// Only a token limit, no stop token (as with `ignore_eos`).
    fn from(max_new_tokens: usize) -> Self {
        Self {
            max_new_tokens,
            stop_token_ids: Vec::new(),
        }
    }
}

/// A sequence [`crate::Scheduler::commit`] ended, already removed (its blocks freed).
#[derive(Clone, Debug)]
pub struct FinishedSeq {
    pub reason: FinishReason,
    pub seq: Sequence,
}

/// A request's tokens and its progress through the KV cache.
#[derive(Clone, Debug)]
pub struct Sequence {
    pub id: SeqId,
    /// Prompt followed by generated tokens.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    pub max_new_tokens: usize,
    /// See [`StopConditions::stop_token_ids`].
    pub stop_token_ids: Vec<u32>,
    /// Tokens whose K/V are in the cache.
    pub num_computed: usize,
    /// KV blocks for positions `0..num_computed` (plus whatever the current plan writes).
    pub block_table: Vec<BlockId>,
    pub state: SeqState,
    /// Arrival time, seconds on the caller's clock.
    pub arrival: f64,
    /// When a chunk of it was first scheduled (queue time = this − arrival).
    pub first_scheduled: Option<f64>,
    /// How many times it lost its blocks.
    pub num_preemptions: u32,
    /// Chained hashes of the full blocks of `tokens` (filled in by the scheduler when prefix
    /// caching is on; survives preemption, since the tokens do).
    pub block_hashes: Vec<BlockHash>,
    /// Leading entries of `block_table` already in the prefix cache (found there on admission
    /// or registered once computed).
    pub num_cached_blocks: usize,
    /// Prompt tokens found in the prefix cache when it was first admitted.
    pub cached_tokens: usize,
    /// Its prompt is scored: every prompt row's logits are computed (`Scheduler::score_prompt`).
    pub score_prompt: bool,
    /// Another choice of the same prompt, whose prompt this one waits for
    /// (`Scheduler::share_prompt`).
    pub shares_prompt_of: Option<SeqId>,
    /// Tokens guessed to follow the last one (`Scheduler::set_draft`), for the next plan only:
    /// the planner feeds as many of them as pay (`planner_drafts.rs`) and drops the rest.
    pub draft: Vec<u32>,
    /// Where `draft` came from.
    pub draft_source: DraftSource,
    /// How often its drafted tokens were right lately.
    pub acceptance: DraftAcceptance,
}

impl Sequence {
    /// A waiting sequence holding no blocks.
    pub fn new(id: SeqId, prompt: Vec<u32>, stop: StopConditions, arrival: f64) -> Self {
        let prompt_len = prompt.len();
        Self {
            id,
            tokens: prompt,
            prompt_len,
            max_new_tokens: stop.max_new_tokens,
            stop_token_ids: stop.stop_token_ids,
            num_computed: 0,
            block_table: Vec::new(),
            state: SeqState::Waiting,
            arrival,
            first_scheduled: None,
            num_preemptions: 0,
            block_hashes: Vec::new(),
            num_cached_blocks: 0,
            cached_tokens: 0,
            score_prompt: false,
            shares_prompt_of: None,
            draft: Vec::new(),
            draft_source: DraftSource::default(),
            acceptance: DraftAcceptance::default(),
        }
    }

    /// Tokens sampled so far (survives preemption).
    pub fn num_generated(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Whether it may still sample: `num_generated() < max_new_tokens`.
    pub fn can_generate(&self) -> bool {
        self.num_generated() < self.max_new_tokens
    }

    /// Tokens not yet in the cache (the prompt left to read, or 1 while decoding).
    pub fn num_uncomputed(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    /// KV positions this sequence can ever occupy: every token but the last one sampled.
    pub fn max_kv_tokens(&self) -> usize {
        Self::kv_tokens_for(self.prompt_len, self.max_new_tokens)
    }

    /// KV positions a sequence of `prompt_len` and `max_new_tokens` can ever occupy.
    pub fn kv_tokens_for(prompt_len: usize, max_new_tokens: usize) -> usize {
        (prompt_len + max_new_tokens).saturating_sub(1)
    }

    /// Whether the token just sampled (the last of `tokens`) ends the sequence, and why. A stop
    /// token wins over the limits: it is not output, so it never counts as the last token.
    pub fn finish_reason(&self, max_model_len: usize) -> Option<FinishReason> {
        let last = *self.tokens.last()?;
        if self.num_generated() == 0 {
            return None;
        }
        if self.stop_token_ids.contains(&last) {
            Some(FinishReason::Stop)
        } else if self.num_generated() >= self.max_new_tokens || self.tokens.len() >= max_model_len
        {
            Some(FinishReason::Length)
        } else {
            None
        }
    }

    /// Seconds since arrival at `now`.
    pub fn age(&self, now: f64) -> f64 {
        now - self.arrival
    }

    /// Admitted: holds (or may hold) blocks and is in the running set.
    pub fn is_running(&self) -> bool {
        matches!(self.state, SeqState::Prefilling | SeqState::Decoding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_tokens() {
        let mut s = Sequence::new(7, vec![1, 2, 3], 2.into(), 0.5);
        assert_eq!(s.state, SeqState::Waiting);
        assert_eq!(
            (s.num_generated(), s.num_uncomputed(), s.max_kv_tokens()),
            (0, 3, 4)
        );
        assert!(s.can_generate());
        s.num_computed = 3;
        s.tokens.push(9);
        assert_eq!((s.num_generated(), s.num_uncomputed()), (1, 1));
        s.tokens.push(9);
        assert!(!s.can_generate());
        assert_eq!(s.age(2.0), 1.5);
    }

    fn sampled(prompt: &[u32], stop: StopConditions, generated: &[u32]) -> Sequence {
        let mut s = Sequence::new(1, prompt.to_vec(), stop, 0.0);
        s.tokens.extend_from_slice(generated);
        s
    }

    fn stops(max_new_tokens: usize, ids: &[u32]) -> StopConditions {
        StopConditions {
            max_new_tokens,
            stop_token_ids: ids.to_vec(),
        }
    }

    #[test]
    fn max_tokens_reached_is_length() {
        let s = sampled(&[1, 2], stops(3, &[0]), &[5, 6]);
        assert_eq!(s.finish_reason(100), None);
        let s = sampled(&[1, 2], stops(3, &[0]), &[5, 6, 7]);
        assert_eq!(s.finish_reason(100), Some(FinishReason::Length));
    }

    #[test]
    fn a_stop_token_is_stop_even_as_the_last_allowed_token() {
        let s = sampled(&[1, 2], stops(3, &[0, 9]), &[5, 9]);
        assert_eq!(s.finish_reason(100), Some(FinishReason::Stop));
        let s = sampled(&[1, 2], stops(2, &[9]), &[5, 9]);
        assert_eq!(s.finish_reason(100), Some(FinishReason::Stop));
    }

    #[test]
    fn the_end_of_the_context_is_length() {
        let s = sampled(&[1, 2, 3], stops(100, &[0]), &[5]);
        assert_eq!(s.finish_reason(5), None);
        let s = sampled(&[1, 2, 3], stops(100, &[0]), &[5, 6]);
        assert_eq!(s.finish_reason(5), Some(FinishReason::Length));
    }

    #[test]
    fn ignore_eos_is_an_empty_stop_set() {
        let s = sampled(&[1, 2], 3.into(), &[0, 2]);
        assert_eq!(s.finish_reason(100), None, "no token stops it");
        let s = sampled(&[1, 2], 3.into(), &[0, 2, 0]);
        assert_eq!(s.finish_reason(100), Some(FinishReason::Length));
    }

    #[test]
    fn nothing_sampled_is_no_finish() {
        let s = sampled(&[0], stops(1, &[0]), &[]);
        assert_eq!(
            s.finish_reason(100),
            None,
            "a stop token in the prompt does not count"
        );
    }
}
