//! The planner's side of prefix caching: find a prompt's cached prefix on admission, give it
//! back if admission fails, register blocks once they are full and computed.

use super::{Scheduler, StepPlan};
use crate::cache_events::CacheEvent;
use crate::sequence::SeqId;
use crate::step_plan::BlockCopy;

impl Scheduler {
    /// Gives a waiting sequence the longest chain of its full blocks found in the cache
    /// (one more holder each) and moves its `num_computed` past them; returns the tokens
    /// reused. At least the last token is always left to compute: its logits are what the
    /// first sample is drawn from. 0 when prefix caching is off.
    ///
    /// Another choice of a prompt its leader has read ([`Scheduler::share_prompt`]) also
    /// takes the prompt's last, partial block: a new block of its own, to be filled with a
    /// copy of the leader's (returned, for the plan) before the step runs, since both will
    /// write their own tokens after the prompt into it.
    pub(super) fn reuse_cached_prefix(&mut self, id: SeqId) -> (usize, Option<BlockCopy>) {
        let seq = self.seqs.get_mut(&id).expect("live id");
        if !self.cfg.prefix_caching || seq.score_prompt {
            return (0, None);
        }
        let bs = self.cfg.block_size;
        debug_assert!(seq.block_table.is_empty() && seq.num_computed == 0);
        self.hasher
            .extend_chain(&mut seq.block_hashes, &seq.tokens, bs);
        let max_blocks = (seq.tokens.len() - 1) / bs;
        for &hash in seq.block_hashes.iter().take(max_blocks) {
            let Some(block) = self.allocator.lookup(hash) else {
                break;
            };
            self.allocator.acquire(block);
            seq.block_table.push(block);
        }
        seq.num_cached_blocks = seq.block_table.len();
        seq.num_computed = seq.block_table.len() * bs;
        let copy = self.copy_shared_tail(id);
        (self.seqs[&id].num_computed, copy)
    }

    /// The leader's block holding the prompt's last, partial block, and a new block of `id`'s
    /// for its copy; `id` then has all but the prompt's last token computed. None, and
    /// nothing changes, unless `id` shares a prompt that its leader has read and holds, all
    /// its full blocks came from the cache, the tail is more than the last token, and a block
    /// is free. The leader cannot be preempted or finish before the step runs: admissions
    /// come after preemption in a plan, and sequences end at commit.
    fn copy_shared_tail(&mut self, id: SeqId) -> Option<BlockCopy> {
        let bs = self.cfg.block_size;
        let seq = &self.seqs[&id];
        let leader = self.seqs.get(&seq.shares_prompt_of?)?;
        let prompt_len = seq.tokens.len();
        let tail = seq.block_table.len();
        let shares = leader.is_running()
            && leader.num_computed >= prompt_len
            && leader.tokens.get(..prompt_len) == Some(&seq.tokens[..])
            && tail == (prompt_len - 1) / bs
            && prompt_len - tail * bs >= 2;
        if !shares {
            return None;
        }
        let source = *leader.block_table.get(tail)?;
        let copy = self.allocator.allocate(1)?[0];
        let seq = self.seqs.get_mut(&id).expect("live id");
        seq.block_table.push(copy);
        seq.num_computed = prompt_len - 1;
        Some((source, copy))
    }

    /// Undoes [`Scheduler::reuse_cached_prefix`] for a sequence that stays in the queue.
    pub(super) fn return_cached_prefix(&mut self, id: SeqId) {
        let seq = self.seqs.get_mut(&id).expect("live id");
        self.allocator.free_table(&seq.block_table);
        seq.block_table.clear();
        seq.num_cached_blocks = 0;
        seq.num_computed = 0;
    }

    /// Counts an admission's lookup, in the step's and the running totals: all its tokens
    /// asked about, `reused` found.
    pub(super) fn count_prefix_lookup(&mut self, id: SeqId, reused: usize, plan: &mut StepPlan) {
        if !self.cfg.prefix_caching {
            return;
        }
        let seq = self.seqs.get_mut(&id).expect("live id");
        if seq.first_scheduled.is_none() {
            seq.cached_tokens = reused;
        }
        for stats in [&mut self.prefix_stats, &mut plan.prefix_cache] {
            stats.queries += seq.tokens.len() as u64;
            stats.hits += reused as u64;
        }
    }

    /// Registers `id`'s blocks that are now full and computed (after a commit). A block whose
    /// contents another block already caches stays private to `id`, and so do the blocks of a
    /// scored prompt: those are computed as generation computes (f32, every row), where a
    /// prompt read for generation computes its rows in bf16.
    pub(super) fn register_computed_blocks(&mut self, id: SeqId) {
        if !self.cfg.prefix_caching {
            return;
        }
        let bs = self.cfg.block_size;
        let Some(seq) = self.seqs.get_mut(&id) else {
            return;
        };
        if !seq.is_running() || seq.score_prompt {
            return;
        }
        let full = seq.num_computed / bs;
        if full <= seq.num_cached_blocks {
            return;
        }
        self.hasher
            .extend_chain(&mut seq.block_hashes, &seq.tokens, bs);
        for i in seq.num_cached_blocks..full {
            let hash = seq.block_hashes[i];
            if self.allocator.register(seq.block_table[i], hash) {
                self.allocator.events.record(|| CacheEvent::Stored {
                    hash,
                    parent: i.checked_sub(1).map(|p| seq.block_hashes[p]),
                    tokens: seq.tokens[i * bs..(i + 1) * bs].to_vec(),
                });
            }
        }
        seq.num_cached_blocks = full;
    }
}
