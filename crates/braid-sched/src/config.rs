//! The planner's knobs and the ways a request can be refused at the door.
//!
//! Refusals happen in `Scheduler::add`, before a request holds anything, so the server can
//! map each one to an HTTP status in one place (queue full → 429, too long → 400/413)
//! instead of discovering later that a request can never run.

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
    /// Bounded waiting queue (new requests; preempted ones are always taken back).
    pub max_waiting: usize,
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
            max_waiting: 256,
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

    /// Whether a request of this shape could ever run, whatever else is queued: the checks
    /// of [`crate::Scheduler::add`] that do not depend on the queue, so a front end can
    /// refuse such a request before it submits it.
    pub fn check_request(&self, prompt_len: usize, max_new_tokens: usize) -> Result<(), AddError> {
        if prompt_len == 0 {
            return Err(AddError::EmptyPrompt);
        }
        if max_new_tokens == 0 {
            return Err(AddError::ZeroMaxNewTokens);
        }
        if prompt_len.saturating_add(max_new_tokens) > self.max_model_len {
            return Err(AddError::TooLong {
                prompt_len,
                max_new_tokens,
                max_model_len: self.max_model_len,
            });
        }
        let needed_tokens = crate::Sequence::kv_tokens_for(prompt_len, max_new_tokens);
        if crate::BlockAllocator::blocks_for(needed_tokens, self.block_size) > self.num_blocks {
            return Err(AddError::ExceedsKvPool {
                needed_tokens,
                pool_tokens: self.pool_tokens(),
            });
        }
        Ok(())
    }
}

/// Why [`crate::Scheduler::add`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    #[error("waiting queue is full; retry later")]
    QueueFull,
    #[error(
        "prompt of {prompt_len} tokens plus `max_tokens` {max_new_tokens} exceeds the \
         context length of {max_model_len} tokens"
    )]
    TooLong {
        prompt_len: usize,
        max_new_tokens: usize,
        max_model_len: usize,
    },
    #[error(
        "request needs {needed_tokens} KV cache tokens but the whole pool holds {pool_tokens}"
    )]
    ExceedsKvPool {
        needed_tokens: usize,
        pool_tokens: usize,
    },
    #[error("prompt is empty: at least one token is required")]
    EmptyPrompt,
    #[error("`max_tokens` must be >= 1")]
    ZeroMaxNewTokens,
    #[error("sequence id {0} is already in use")]
    DuplicateId(u64),
}
