//! Prefix caching: naming a full KV block by everything that led up to it.
//!
//! The K/V of position `p` depend on tokens `0..=p` and nothing else, so a full block can be
//! reused by any sequence whose tokens agree with it *and with everything before it*. Each
//! full block is therefore keyed by a chained hash:
//!
//! ```text
//! h(block 0) = H(none, tokens[0..B])
//! h(block i) = H(h(block i−1), tokens[i·B..(i+1)·B])
//! ```
//!
//! and a new sequence walks its own chain through the allocator's index
//! ([`crate::BlockAllocator::lookup`]), stopping at the first miss: the blocks found are
//! its cached prefix, shared by reference count, and its `num_computed` starts after them.
//! The walk stops one token short of the end, because the last token must be fed to get the
//! logits the first sample is drawn from. Blocks filled by generated tokens are registered
//! too, so a chat's next turn (previous prompt + answer + new message) hits all of it. Those
//! positions were computed as generated rows, in f32, where a cold read of the next turn would
//! compute them as prompt rows, in bf16 (`braid_kernels::attention::GroupTask::bf16`): reusing
//! an answer is worth the last bits it can change.
//!
//! `H` is SipHash under two random per-process keys, giving 128 bits: a collision would
//! silently hand a sequence someone else's K/V, so the key is wide enough never to collide
//! in practice and keyed so that no client can construct a collision on purpose.
//!
//! The cache's *accounting* lives in the allocator (which blocks are registered, which are
//! evictable); the planner decides when to look up (admission) and when to register (after
//! a step commits, once a block is full and computed).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// The chained hash of a full block of tokens and every token before it.
pub type BlockHash = u128;

/// Computes chained block hashes; one per scheduler, keyed at random.
#[derive(Clone, Debug, Default)]
pub struct BlockHasher {
    lo: RandomState,
    hi: RandomState,
}

impl BlockHasher {
    pub fn new() -> Self {
        Self::default()
    }

    /// The hash of a block holding `tokens` whose predecessor hashes to `parent` (`None` for
    /// the first block).
    pub fn hash(&self, parent: Option<BlockHash>, tokens: &[u32]) -> BlockHash {
        let key = (parent, tokens);
        let lo = self.lo.hash_one(key);
        let hi = self.hi.hash_one(key);
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// Extends `hashes` (the chain of the first `hashes.len()` full blocks of `tokens`) to
    /// every full block of `tokens`.
    pub fn extend_chain(&self, hashes: &mut Vec<BlockHash>, tokens: &[u32], block_size: usize) {
        let full = tokens.len() / block_size;
        while hashes.len() < full {
            let i = hashes.len();
            let h = self.hash(
                hashes.last().copied(),
                &tokens[i * block_size..(i + 1) * block_size],
            );
            hashes.push(h);
        }
    }
}

/// Prefix-cache lookups, counted in tokens as vLLM does: every admission asks about all of a
/// sequence's tokens (`queries`), and `hits` is how many it did not have to compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    pub queries: u64,
    pub hits: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_hash_depends_on_everything_before_it() {
        let h = BlockHasher::new();
        let mut a = Vec::new();
        h.extend_chain(&mut a, &[1, 2, 3, 4, 5, 6, 7], 2);
        assert_eq!(a.len(), 3, "only full blocks are hashed");
        let mut b = Vec::new();
        h.extend_chain(&mut b, &[9, 2, 3, 4, 5, 6], 2);
        assert_ne!(a[0], b[0]);
        assert_ne!(a[1], b[1], "same tokens, different prefix");
        let mut c = a[..1].to_vec();
        h.extend_chain(&mut c, &[1, 2, 3, 4, 5, 6, 7, 8], 2);
        assert_eq!(
            &c[..3],
            &a[..],
            "extending a chain agrees with hashing it whole"
        );
        assert_eq!(c.len(), 4);
        assert_ne!(h.hash(None, &[1, 2]), h.hash(None, &[2, 1]));
    }
}
