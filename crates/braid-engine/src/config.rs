//! The engine's settings (from `braid serve`'s flags) and the scheduler configuration they
//! become once the model's shape is known.

use braid_model::{KvDtype, KvPool, LoadedModel, ModelConfig};
use braid_sched::SchedulerConfig;
use std::sync::Arc;
use std::time::Duration;

/// The one KV block size attention handles: it scores a block's keys as one 16-lane vector per
/// dimension. Larger blocks were accepted once and read only their first 16 keys, which garbled
/// every answer.
pub const ATTENTION_BLOCK: usize = 16;

/// Engine settings, from `braid serve`'s flags.
#[derive(Clone)]
pub struct EngineConfig {
    pub kv_cache_mb: usize,
    pub block_size: usize,
    pub max_num_seqs: usize,
    pub max_batched_tokens: usize,
    pub max_waiting: usize,
    pub chunked_prefill: bool,
    /// None disables the latency target (only `max_batched_tokens` bounds a step).
    pub itl_target: Option<Duration>,
    pub starvation_after: Duration,
    /// Reuse the K/V of cached prompt prefixes (`--no-prefix-cache` turns it off).
    pub prefix_caching: bool,
    /// The generation model also embeds, its final hidden states pooled so (`--pooling`).
    pub pooling: Option<braid_embedding::Pooling>,
    /// Speculative decoding (`--speculative`, `--num-speculative-tokens`).
    pub speculation: crate::Speculation,
    /// The model that drafts in place of the n-gram sources (`--draft-model`); it shares the
    /// KV cache's memory.
    pub draft_model: Option<Arc<LoadedModel>>,
    /// How the KV cache stores keys and values (`--kv-cache-dtype`), for both models.
    pub kv_cache_dtype: KvDtype,
}

impl EngineConfig {
    /// The scheduler's configuration for a server that only embeds: no sequence is ever
    /// admitted, so it has one block's worth of everything but the step's token cap.
    pub fn embedding_scheduler_config(&self) -> anyhow::Result<SchedulerConfig> {
        let cfg = SchedulerConfig {
            block_size: self.block_size,
            num_blocks: 1,
            max_num_seqs: 1,
            max_batched_tokens: self.max_batched_tokens,
            max_model_len: self.block_size,
            chunked_prefill: self.chunked_prefill,
            itl_target: self.itl_target,
            starvation_after: self.starvation_after,
            min_prefill_chunk: 1,
            prefix_caching: false,
        };
        cfg.validate()
            .map_err(|e| anyhow::anyhow!("engine settings: {e}"))?;
        Ok(cfg)
    }

    /// The scheduler's configuration for `model`, or why these settings cannot run it.
    pub fn scheduler_config(&self, model: &ModelConfig) -> anyhow::Result<SchedulerConfig> {
        // A draft model's pool has the same blocks, so a block costs both models' bytes.
        let num_blocks = match &self.draft_model {
            None => KvPool::blocks_for_budget(
                model,
                self.block_size,
                self.kv_cache_mb,
                self.kv_cache_dtype,
            ),
            Some(draft) => KvPool::blocks_for_shared_budget(
                &[model.into(), draft.config().into()],
                self.block_size,
                self.kv_cache_mb,
                self.kv_cache_dtype,
            ),
        };
        let heads = std::iter::once(model.head_dim)
            .chain(self.draft_model.as_ref().map(|d| d.config().head_dim));
        for head_dim in heads {
            if let Some(why) = self.kv_cache_dtype.unsupported_for(head_dim) {
                anyhow::bail!("--kv-cache-dtype {}: {why}", self.kv_cache_dtype);
            }
        }
        let cfg = SchedulerConfig {
            block_size: self.block_size,
            num_blocks,
            max_num_seqs: self.max_num_seqs,
            max_batched_tokens: self.max_batched_tokens,
            max_model_len: model.context_length,
            chunked_prefill: self.chunked_prefill,
            itl_target: self.itl_target,
            starvation_after: self.starvation_after,
            min_prefill_chunk: 16.min(self.max_batched_tokens),
            prefix_caching: self.prefix_caching,
        };
        cfg.validate()
            .map_err(|e| anyhow::anyhow!("engine settings: {e}"))?;
        if num_blocks * self.block_size < 2 * self.block_size {
            anyhow::bail!(
                "--kv-cache-mb {} holds fewer than two blocks of {} tokens for this model",
                self.kv_cache_mb,
                self.block_size
            );
        }
        if self.block_size != ATTENTION_BLOCK {
            anyhow::bail!(
                "--block-size {} is not supported: attention reads KV blocks of exactly \
                 {ATTENTION_BLOCK} tokens; leave it at {ATTENTION_BLOCK}, the default",
                self.block_size
            );
        }
        Ok(cfg)
    }
}
