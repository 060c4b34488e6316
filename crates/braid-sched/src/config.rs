//! The planner's knobs, and which requests it can run at all.
//!
//! A request the planner could never run (no prompt, nothing to generate, longer than the
//! context, more than the whole KV pool) must be refused before it is added, while it holds
//! nothing: the server validates every field once, and the engine handle checks the one bound
//! only the engine knows (the pool, `exceeds_kv_pool`). `Scheduler::add` only debug-asserts
//! `admits`, and never refuses: how many may wait is the engine handle's to bound.

use std::time::Duration;

/// Limits and policy for [`crate::Scheduler`].
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Tokens per KV block, e.g. 16.
    pub block_size: usize,
    /// KV pool size in blocks.
    pub num_blocks: usize,
    /// Most sequences admitted at once (the running set); so also most rows sampled per step.
    pub max_num_seqs: usize,
    /// Hard cap on rows (decodes + prompt slices) in one step. Must be `>= max_num_seqs`.
    pub max_batched_tokens: usize,
    /// Context length: `prompt_len + max_new_tokens` must fit.
    pub max_model_len: usize,
    /// `false`: a prompt is read whole in one step (the stall braid exists to fix).
    pub chunked_prefill: bool,
    /// Predicted step time to stay under while anybody decodes; `None` = only the token cap.
    pub itl_target: Option<Duration>,
    /// A prompt that arrived longer ago than this is guaranteed progress every step.
    pub starvation_after: Duration,
    /// Smallest prompt slice worth scheduling when the latency target is tight, and the
    /// slice a starving prompt is guaranteed.
    pub min_prefill_chunk: usize,
    /// Reuse the K/V of full blocks another sequence (or an earlier turn) already computed
    /// for the same prefix; see [`crate::prefix_cache`].
    pub prefix_caching: bool,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            block_size: 16,
            num_blocks: 1024,
            max_num_seqs: 32,
            max_batched_tokens: 512,
            max_model_len: 8192,
            chunked_prefill: true,
            itl_target: Some(Duration::from_millis(100)),
            starvation_after: Duration::from_secs(2),
            min_prefill_chunk: 16,
            prefix_caching: true,
        }
    }
}

impl SchedulerConfig {
    /// Checks the limits are consistent; `Scheduler::new` panics with this message otherwise.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("block_size", self.block_size),
            ("num_blocks", self.num_blocks),
            ("max_num_seqs", self.max_num_seqs),
            ("max_batched_tokens", self.max_batched_tokens),
            ("max_model_len", self.max_model_len),
            ("min_prefill_chunk", self.min_prefill_chunk),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(format!("`{name}` must be > 0"));
            }
        }
        if self.max_batched_tokens < self.max_num_seqs {
            return Err(format!(
                "`max_batched_tokens` ({}) must be >= `max_num_seqs` ({}): every running \
                 sequence must be able to decode in one step",
                self.max_batched_tokens, self.max_num_seqs
            ));
        }
        if self.num_blocks > crate::BlockId::MAX as usize {
            return Err(format!(
                "`num_blocks` ({}) exceeds the block id range",
                self.num_blocks
            ));
        }
        Ok(())
    }

    /// KV positions the whole pool holds.
    pub fn pool_tokens(&self) -> usize {
        self.num_blocks * self.block_size
    }

    /// The KV positions a request of this shape needs, when they are more than the whole
    /// pool holds: nothing that finishes could ever make room for it.
    pub fn exceeds_kv_pool(&self, prompt_len: usize, max_new_tokens: usize) -> Option<usize> {
        let needed_tokens = crate::Sequence::kv_tokens_for(prompt_len, max_new_tokens);
        (crate::BlockAllocator::blocks_for(needed_tokens, self.block_size) > self.num_blocks)
            .then_some(needed_tokens)
    }

    /// Whether [`crate::Scheduler::add`] takes a request of this shape: a prompt, at least one
    /// token to generate, within the context and the KV pool.
    pub fn admits(&self, prompt_len: usize, max_new_tokens: usize) -> bool {
        prompt_len > 0
            && max_new_tokens > 0
            && prompt_len.saturating_add(max_new_tokens) <= self.max_model_len
            && self.exceeds_kv_pool(prompt_len, max_new_tokens).is_none()
    }
}
