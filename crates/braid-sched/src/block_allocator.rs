//! KV block accounting, kept apart from the queue.
//!
//! The KV cache is one preallocated pool of fixed-size blocks; a sequence owns a list of
//! block ids (its block table). This module only hands out and takes back ids: it knows
//! nothing of sequences, tokens or tensors, so its invariants (every block is either free
//! or held, never both, never lost) can be tested on their own and the planner can trust
//! a single number, `num_free`, when it decides what fits.
//!
//! Blocks carry reference counts rather than a plain in-use bit so that prefix caching can
//! later let two sequences share a block ([`BlockAllocator::retain`]) without changing how
//! freeing works: a block returns to the pool when its last holder frees it. Today every
//! block has exactly one holder.
//!
//! Freeing a block that is already free is a logic error in the caller. It panics in debug
//! builds (and so in tests); a release build ignores the extra free rather than corrupt
//! the free list, because a duplicate id on the free list would later hand the same
//! memory to two sequences.

/// Index of one KV block in the pool.
pub type BlockId = u32;

/// Hands out KV block ids from a fixed pool; all-or-nothing allocation, reference counted.
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    /// Holders per block; 0 means free.
    ref_counts: Vec<u32>,
    /// Free block ids; allocation pops from the end.
    free_list: Vec<BlockId>,
}

impl BlockAllocator {
    /// A pool of `num_blocks` free blocks.
    ///
    /// # Panics
    /// If `num_blocks` does not fit a [`BlockId`].
    pub fn new(num_blocks: usize) -> Self {
        assert!(
            num_blocks <= BlockId::MAX as usize,
            "num_blocks {num_blocks} exceeds the BlockId range"
        );
        // Reversed so that blocks are handed out in ascending order (easier to read in logs).
        let free_list = (0..num_blocks as BlockId).rev().collect();
        Self {
            ref_counts: vec![0; num_blocks],
            free_list,
        }
    }

    /// Total blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks nobody holds.
    pub fn num_free(&self) -> usize {
        self.free_list.len()
    }

    /// Blocks held by at least one holder.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// `n` blocks, each with one holder, or `None` (and nothing taken) if fewer are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.free_list.len() {
            return None;
        }
        let mut blocks = self.free_list.split_off(self.free_list.len() - n);
        blocks.reverse(); // lowest id first
        for &b in &blocks {
            debug_assert_eq!(self.ref_counts[b as usize], 0, "free block {b} was held");
            self.ref_counts[b as usize] = 1;
        }
        Some(blocks)
    }

    /// Drops one holder from each block; a block with no holder left returns to the pool.
    ///
    /// Freeing a free block (or an id outside the pool) panics in debug builds and is
    /// ignored in release builds.
    pub fn free(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            // Accounting that has gone wrong must stop the step rather than let two
            // sequences write the same block: the engine fails the step and starts afresh.
            let pool = self.ref_counts.len();
            let Some(count) = self.ref_counts.get_mut(b as usize) else {
                panic!("free of block {b} outside a pool of {pool}");
            };
            assert!(*count > 0, "double free of KV block {b}");
            *count -= 1;
            if *count == 0 {
                self.free_list.push(b);
            }
        }
    }

    /// Adds one holder to each (already held) block, for sharing a prefix between sequences.
    ///
    /// Retaining a free block panics in debug builds and is ignored in release builds.
    pub fn retain(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            match self.ref_counts.get_mut(b as usize) {
                Some(count) if *count > 0 => *count += 1,
                _ => panic!("retain of unheld KV block {b}"),
            }
        }
    }

    /// Number of holders of `block` (0 = free or out of range).
    pub fn ref_count(&self, block: BlockId) -> u32 {
        self.ref_counts.get(block as usize).copied().unwrap_or(0)
    }

    /// Fraction of the pool in use, `0.0..=1.0` (0.0 for an empty pool).
    pub fn usage(&self) -> f64 {
        if self.num_blocks() == 0 {
            0.0
        } else {
            self.num_used() as f64 / self.num_blocks() as f64
        }
    }

    /// Blocks needed to hold `tokens` positions with `block_size` tokens per block.
    pub fn blocks_for(tokens: usize, block_size: usize) -> usize {
        tokens.div_ceil(block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn allocate_and_free_round_trip() {
        let mut a = BlockAllocator::new(8);
        assert_eq!((a.num_blocks(), a.num_free(), a.usage()), (8, 8, 0.0));
        let x = a.allocate(3).unwrap();
        assert_eq!(x, vec![0, 1, 2]);
        assert_eq!(a.num_free(), 5);
        assert_eq!(a.usage(), 3.0 / 8.0);
        let y = a.allocate(5).unwrap();
        assert_eq!(a.num_free(), 0);
        assert_eq!(a.usage(), 1.0);
        let all: HashSet<_> = x.iter().chain(&y).collect();
        assert_eq!(all.len(), 8, "no block handed out twice");
        a.free(&x);
        assert_eq!(a.num_free(), 3);
        a.free(&y);
        assert_eq!(a.num_free(), 8);
        assert_eq!(a.usage(), 0.0);
    }

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut a = BlockAllocator::new(4);
        let held = a.allocate(3).unwrap();
        assert!(a.allocate(2).is_none());
        assert_eq!(a.num_free(), 1, "a failed allocation takes nothing");
        assert_eq!(a.allocate(1).unwrap().len(), 1);
        assert!(a.allocate(1).is_none());
        assert_eq!(a.allocate(0), Some(vec![]));
        a.free(&held);
        assert_eq!(a.num_free(), 3);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_detected() {
        let mut a = BlockAllocator::new(2);
        let b = a.allocate(1).unwrap();
        a.free(&b);
        a.free(&b);
    }

    #[test]
    #[should_panic(expected = "outside a pool")]
    fn free_of_foreign_block_is_detected() {
        let mut a = BlockAllocator::new(2);
        a.free(&[7]);
    }

    #[test]
    fn shared_block_returns_on_last_free() {
        let mut a = BlockAllocator::new(2);
        let b = a.allocate(1).unwrap();
        a.retain(&b);
        assert_eq!(a.ref_count(b[0]), 2);
        a.free(&b);
        assert_eq!(a.num_free(), 1, "still held by the second holder");
        a.free(&b);
        assert_eq!(a.num_free(), 2);
        assert_eq!(a.ref_count(b[0]), 0);
    }

    #[test]
    fn blocks_for_rounds_up() {
        assert_eq!(BlockAllocator::blocks_for(0, 16), 0);
        assert_eq!(BlockAllocator::blocks_for(1, 16), 1);
        assert_eq!(BlockAllocator::blocks_for(16, 16), 1);
        assert_eq!(BlockAllocator::blocks_for(17, 16), 2);
    }

    /// Random alloc/free sequences: free + used == total, and the held sets never overlap.
    #[test]
    fn random_alloc_free_keeps_the_books() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            // xorshift64*: deterministic, no dependency.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        for round in 0..200 {
            let total = 1 + (next() % 64) as usize;
            let mut a = BlockAllocator::new(total);
            let mut held: Vec<Vec<BlockId>> = Vec::new();
            for _ in 0..300 {
                if next() % 2 == 0 || held.is_empty() {
                    let n = (next() % 9) as usize;
                    let before = a.num_free();
                    match a.allocate(n) {
                        Some(b) => {
                            assert_eq!(b.len(), n);
                            held.push(b);
                        }
                        None => {
                            assert!(n > before, "round {round}: refused {n} with {before} free");
                            assert_eq!(a.num_free(), before);
                        }
                    }
                } else {
                    let i = (next() as usize) % held.len();
                    a.free(&held.swap_remove(i));
                }
                let used: usize = held.iter().map(Vec::len).sum();
                assert_eq!(a.num_free() + used, total, "round {round}");
                assert_eq!(a.num_used(), used);
                let distinct: HashSet<_> = held.iter().flatten().collect();
                assert_eq!(
                    distinct.len(),
                    used,
                    "round {round}: a block was handed out twice"
                );
                assert!((0.0..=1.0).contains(&a.usage()));
            }
        }
    }
}
