//! A step is a value.
//!
//! The planner's whole decision for one engine step is this plain description: which
//! slices of which sequences to feed, which of their last rows to sample, and who lost
//! their blocks. The engine executes it without asking the planner anything else, and the
//! planner's tests inspect it without a model. What planning did (preemptions, prefix-cache
//! lookups) is counted in the plan too, so whoever reports a step reads its own numbers
//! instead of differencing the scheduler's running totals.

use crate::block_allocator::BlockId;
use crate::embedding_queue::EmbeddingBatch;
use crate::prefix_cache::PrefixCacheStats;
use crate::sequence::{SeqId, Sequence};
use std::borrow::Cow;

/// A KV block to copy before a step runs: (source, destination).
pub type BlockCopy = (BlockId, BlockId);

/// Feed `tokens[start..start + len]` of sequence `seq`, writing K/V at positions
/// `start..start + len` through its block table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledChunk {
    pub seq: SeqId,
    /// First position fed; always the sequence's `num_computed` when planned.
    pub start: usize,
    /// Rows fed; at least 1.
    pub len: usize,
    /// Sample from the last row's logits: the chunk reaches the end of `tokens`.
    pub sample: bool,
    /// A decode (one generated token fed back), as opposed to a prompt slice.
    pub is_decode: bool,
    /// Every row's logits are wanted, not just the sampled last one: the sequence's prompt
    /// is being scored.
    pub all_logits: bool,
    /// A decode that also verifies this many drafted tokens (speculative decoding): its rows
    /// feed the last sampled token and then `Sequence::draft[..drafted]`
    /// ([`ScheduledChunk::tokens`]), so `len == 1 + drafted`, and every row's logits are sampled
    /// in order until a sample disagrees with the draft.
    pub drafted: usize,
}

impl ScheduledChunk {
    /// Positions `start..start + len`.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.len
    }

    /// The tokens it feeds of `seq` (its own sequence): its slice of the tokens, then the
    /// drafted tokens it verifies.
    pub fn tokens<'s>(&self, seq: &'s Sequence) -> Cow<'s, [u32]> {
        if self.drafted == 0 {
            return Cow::Borrowed(&seq.tokens[self.range()]);
        }
        let mut fed = seq.tokens[self.start..self.start + 1].to_vec();
        fed.extend_from_slice(&seq.draft[..self.drafted]);
        Cow::Owned(fed)
    }
}

/// One engine step: chunks in order (decodes first, then prompt slices), plus what the
/// planner did to make room.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepPlan {
    pub chunks: Vec<ScheduledChunk>,
    /// Sequences preempted while planning this step (already back in the queue; their
    /// blocks are free and must not be read).
    pub preempted: Vec<SeqId>,
    /// The cost model's prediction for this step, in seconds (`None` for an empty step).
    pub predicted_secs: Option<f64>,
    /// What the step's prompt slices were sized to, in seconds: the latency target times the
    /// share of it the cost model's error leaves ([`crate::step_headroom::StepHeadroom`]).
    /// `None` without a target, or when nobody decodes and the target does not apply.
    pub planned_to_secs: Option<f64>,
    /// Prefix-cache lookups made while planning this step (one per admission), in tokens.
    pub prefix_cache: PrefixCacheStats,
    /// KV blocks to copy, (source, destination), before the step runs: the prompt's last,
    /// partial block, from the choice that read the prompt to another choice of it.
    pub block_copies: Vec<BlockCopy>,
    /// Texts for the embedding model, read in one forward.
    pub embeddings: Option<EmbeddingBatch>,
}

impl StepPlan {
    /// Nothing to run.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.embeddings.is_none()
    }

    /// Texts this step embeds.
    pub fn num_embed_texts(&self) -> usize {
        self.embeddings.as_ref().map_or(0, |b| b.texts.len())
    }

    /// Tokens the embedding model reads in this step.
    pub fn num_embed_tokens(&self) -> usize {
        self.embeddings.as_ref().map_or(0, EmbeddingBatch::tokens)
    }

    /// Rows fed in total (decodes + prompt tokens).
    pub fn num_tokens(&self) -> usize {
        self.chunks.iter().map(|c| c.len).sum()
    }

    /// Prompt tokens fed (including recomputation of preempted sequences).
    pub fn num_prefill_tokens(&self) -> usize {
        self.chunks
            .iter()
            .filter(|c| !c.is_decode)
            .map(|c| c.len)
            .sum()
    }

    /// Decoding sequences in the step (one chunk each, whatever it verifies).
    pub fn num_decodes(&self) -> usize {
        self.chunks.iter().filter(|c| c.is_decode).count()
    }

    /// Drafted tokens verified in the step, over all its decodes.
    pub fn num_drafted(&self) -> usize {
        self.chunks.iter().map(|c| c.drafted).sum()
    }

    /// Rows whose logits are sampled (one per chunk with `sample`).
    pub fn num_samples(&self) -> usize {
        self.chunks.iter().filter(|c| c.sample).count()
    }

    /// The chunk for `seq`, if it is in this step.
    pub fn chunk(&self, seq: SeqId) -> Option<&ScheduledChunk> {
        self.chunks.iter().find(|c| c.seq == seq)
    }
}
