//! The scheduler's bookkeeping, checked from scratch: the rules every other file relies on,
//! stated once as code, so tests and simulations can assert them after every step.

use super::Scheduler;
use crate::sequence::{SeqId, SeqState};
use std::collections::HashMap;

impl Scheduler {
    /// Checks the bookkeeping: every sequence is in exactly one list in a matching state, no
    /// request group outlives its sequences, block tables cover what is computed and account
    /// for exactly the used blocks, a block is shared only if it is cached, full and computed
    /// in every table holding it (with a reference per holder) and registered under that
    /// table's own hash for it. For tests and debug assertions; O(blocks).
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.running.len() + self.waiting.len() != self.seqs.len() {
            return Err("a sequence is in no list or in two".into());
        }
        if self.running.len() > self.cfg.max_num_seqs {
            return Err(format!("{} running > max_num_seqs", self.running.len()));
        }
        if self.shares.num_groups() > self.seqs.len() {
            return Err(format!(
                "{} request groups for {} sequences: a group outlived its requests",
                self.shares.num_groups(),
                self.seqs.len()
            ));
        }
        let mut holders: HashMap<crate::BlockId, Vec<SeqId>> = HashMap::new();
        for &id in &self.running {
            let s = self.seqs.get(&id).ok_or(format!("running {id} unknown"))?;
            if !s.is_running() {
                return Err(format!("running {id} in state {:?}", s.state));
            }
            if s.block_table.len() * self.cfg.block_size < s.num_computed {
                return Err(format!(
                    "{id}: blocks do not cover {} computed",
                    s.num_computed
                ));
            }
            if s.state == SeqState::Decoding && s.tokens.len() != s.num_computed + 1 {
                return Err(format!(
                    "{id}: decoding with {} uncomputed",
                    s.num_uncomputed()
                ));
            }
            if s.num_cached_blocks * self.cfg.block_size > s.num_computed
                || s.num_cached_blocks > s.block_table.len()
            {
                return Err(format!("{id}: cached blocks past what is computed"));
            }
            for (i, &b) in s.block_table.iter().enumerate() {
                holders.entry(b).or_default().push(id);
                if let Some(h) = self.allocator.cached_hash(b) {
                    if s.block_hashes.get(i) != Some(&h) || i >= s.num_cached_blocks {
                        return Err(format!("{id}: block {b} at {i} cached for other tokens"));
                    }
                }
            }
        }
        for (&b, ids) in &holders {
            if ids.len() > 1 && self.allocator.cached_hash(b).is_none() {
                return Err(format!("uncached block {b} held by {ids:?}"));
            }
            if self.allocator.ref_count(b) as usize != ids.len() {
                return Err(format!(
                    "block {b} held by {ids:?} with {} references",
                    self.allocator.ref_count(b)
                ));
            }
        }
        for &id in &self.waiting {
            let s = self.seqs.get(&id).ok_or(format!("waiting {id} unknown"))?;
            let queued = matches!(s.state, SeqState::Waiting | SeqState::Preempted);
            if !s.draft.is_empty() {
                return Err(format!("waiting {id} holds a draft"));
            }
            if !queued || !s.block_table.is_empty() || s.num_computed != 0 {
                return Err(format!(
                    "waiting {id} in state {:?} holding blocks",
                    s.state
                ));
            }
        }
        for s in self.seqs.values() {
            if s.num_generated() > s.max_new_tokens || s.num_computed > s.tokens.len() {
                return Err(format!("{}: generated or computed past its limit", s.id));
            }
        }
        if holders.len() != self.allocator.num_used() {
            return Err(format!(
                "block tables hold {} blocks, allocator says {} used",
                holders.len(),
                self.allocator.num_used()
            ));
        }
        Ok(())
    }
}
