//! KV block accounting, kept apart from the queue.
//!
//! The KV cache is one preallocated pool of fixed-size blocks; a sequence owns a list of
//! block ids (its block table). This module only hands out and takes back ids: it knows
//! nothing of sequences, tokens or tensors, so its invariants (every block is free, cached
//! or held, never two of these, never lost) can be tested on their own and the planner can
//! trust a single number, `num_free`, when it decides what fits.
//!
//! **Prefix caching.** A full block whose K/V are computed can be *registered* under the
//! hash of its contents (see [`crate::prefix_cache`]). A registered block may be held by
//! several sequences at once ([`BlockAllocator::acquire`] adds a holder), and when its last
//! holder frees it, it is not wiped: it goes to an *evictable* set, still findable by
//! [`BlockAllocator::lookup`], until an allocation finds the plain free list empty and
//! evicts the least recently released one. So a block's states are:
//!
//! ```text
//!   free ──allocate──▶ held ──register──▶ held+cached ──free (last holder)──▶ evictable
//!    ▲                  │                     ▲                                  │  │
//!    └──────free────────┘                     └───────────acquire (hit)──────────┘  │
//!    ▲                                                                              │
//!    └──────────────────────────allocate (pool short: evict LRU)────────────────────┘
//! ```
//!
//! Evictable blocks count as free (`num_free`) and not as used (`usage`), because any
//! allocation can take them. Only a block nobody holds is ever evicted, so a sequence's
//! K/V are never overwritten under it. Free a sequence's table last block first
//! ([`BlockAllocator::free_table`]): its tail is then evicted before its head, which other
//! requests are likelier to share.
//!
//! Freeing a block that is already free is a logic error in the caller and panics (in
//! release builds too): a duplicate id on the free list would later hand the same memory
//! to two sequences; the engine fails the step and starts afresh instead.

use crate::cache_events::{CacheEvent, CacheEvents};
use crate::prefix_cache::BlockHash;
use std::collections::{BTreeMap, HashMap};

/// Index of one KV block in the pool.
pub type BlockId = u32;

/// Hands out KV block ids from a fixed pool; all-or-nothing allocation, reference counted,
/// with an LRU set of cached blocks nobody holds.
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    /// Holders per block; 0 means free or evictable.
    ref_counts: Vec<u32>,
    /// Blocks with no holder and no cached contents; allocation pops from the end.
    free_list: Vec<BlockId>,
    /// The hash a block is registered under, if it is in the prefix cache.
    hash_of: Vec<Option<BlockHash>>,
    /// The prefix cache's index: contents hash → block.
    by_hash: HashMap<BlockHash, BlockId>,
    /// Cached blocks nobody holds, by release time (oldest first = evicted first).
    evictable: BTreeMap<u64, BlockId>,
    /// For a block in `evictable`, its key there.
    released_at: Vec<u64>,
    /// Release counter for `evictable`'s keys.
    clock: u64,
    /// What the prefix cache stored and dropped, for publishing (kept only when enabled).
    pub events: CacheEvents,
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
            hash_of: vec![None; num_blocks],
            by_hash: HashMap::new(),
            evictable: BTreeMap::new(),
            released_at: vec![0; num_blocks],
            clock: 0,
            events: CacheEvents::default(),
        }
    }

    /// Total blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks nobody holds: plain free ones plus cached ones that may be evicted.
    pub fn num_free(&self) -> usize {
        self.free_list.len() + self.evictable.len()
    }

    /// Blocks held by at least one holder.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// Blocks registered in the prefix cache (held or evictable).
    pub fn num_cached(&self) -> usize {
        self.by_hash.len()
    }

    /// Cached blocks nobody holds (the first to go when the pool needs room).
    pub fn num_evictable(&self) -> usize {
        self.evictable.len()
    }

    /// `n` blocks, each with one holder, or `None` (and nothing taken) if fewer are free.
    /// Plain free blocks go first; then the least recently released cached blocks are
    /// evicted (dropped from the prefix cache) and reused.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.num_free() {
            return None;
        }
        let from_list = n.min(self.free_list.len());
        let mut blocks = self.free_list.split_off(self.free_list.len() - from_list);
        blocks.reverse(); // lowest id first
        while blocks.len() < n {
            let (_, b) = self.evictable.pop_first().expect("counted above");
            let hash = self.hash_of[b as usize]
                .take()
                .expect("evictable block is cached");
            self.by_hash.remove(&hash);
            self.events.record(|| CacheEvent::Removed { hash });
            blocks.push(b);
        }
        for &b in &blocks {
            debug_assert_eq!(self.ref_counts[b as usize], 0, "free block {b} was held");
            self.ref_counts[b as usize] = 1;
        }
        Some(blocks)
    }

    /// Drops one holder from each block, in the order given. A block with no holder left
    /// returns to the pool: to the evictable set if it is cached, else to the free list.
    ///
    /// # Panics
    /// On freeing a free block or an id outside the pool.
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
                if self.hash_of[b as usize].is_some() {
                    self.evictable.insert(self.clock, b);
                    self.released_at[b as usize] = self.clock;
                    self.clock += 1;
                } else {
                    self.free_list.push(b);
                }
            }
        }
    }

    /// Frees a sequence's block table, last block first, so that when its cached blocks are
    /// evicted, its tail goes before its (more widely shared) head.
    pub fn free_table(&mut self, table: &[BlockId]) {
        let reversed: Vec<BlockId> = table.iter().rev().copied().collect();
        self.free(&reversed);
    }

    /// Adds one holder to each (already held) block.
    ///
    /// # Panics
    /// On retaining a block nobody holds (use [`BlockAllocator::acquire`] for cached ones).
    pub fn retain(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            match self.ref_counts.get_mut(b as usize) {
                Some(count) if *count > 0 => *count += 1,
                _ => panic!("retain of unheld KV block {b}"),
            }
        }
    }

    /// The cached block registered under `hash`, held or evictable.
    pub fn lookup(&self, hash: BlockHash) -> Option<BlockId> {
        self.by_hash.get(&hash).copied()
    }

    /// Adds a holder to a cached block (a prefix-cache hit); an evictable block leaves the
    /// evictable set.
    ///
    /// # Panics
    /// If `block` is not in the prefix cache.
    pub fn acquire(&mut self, block: BlockId) {
        let i = block as usize;
        assert!(
            self.hash_of.get(i).is_some_and(Option::is_some),
            "acquire of uncached KV block {block}"
        );
        if self.ref_counts[i] == 0 {
            let removed = self.evictable.remove(&self.released_at[i]);
            debug_assert_eq!(removed, Some(block), "evictable set out of step");
        }
        self.ref_counts[i] += 1;
    }

    /// Registers a held, full, computed block in the prefix cache under `hash`. Returns
    /// `false` (and changes nothing) if the block is already registered or another block
    /// already holds these contents (two sequences computed the same block at once; the
    /// first one stays the cached copy).
    ///
    /// # Panics
    /// If `block` is not held.
    pub fn register(&mut self, block: BlockId, hash: BlockHash) -> bool {
        assert!(
            self.ref_count(block) > 0,
            "register of unheld KV block {block}"
        );
        if self.hash_of[block as usize].is_some() || self.by_hash.contains_key(&hash) {
            return false;
        }
        self.hash_of[block as usize] = Some(hash);
        self.by_hash.insert(hash, block);
        true
    }

    /// The hash `block` is registered under, if it is cached.
    pub fn cached_hash(&self, block: BlockId) -> Option<BlockHash> {
        self.hash_of.get(block as usize).copied().flatten()
    }

    /// Number of holders of `block` (0 = free, evictable or out of range).
    pub fn ref_count(&self, block: BlockId) -> u32 {
        self.ref_counts.get(block as usize).copied().unwrap_or(0)
    }

    /// Fraction of the pool held by sequences, `0.0..=1.0` (0.0 for an empty pool); cached
    /// blocks nobody holds do not count.
    pub fn usage(&self) -> f64 {
        if self.num_blocks() == 0 {
            0.0
        } else {
            self.num_used() as f64 / self.num_blocks() as f64
        }
    }

    /// Drops every cached block nobody holds from the prefix cache (a router's cache flush);
    /// blocks sequences hold stay cached, since their holders still read them. Returns how
    /// many were dropped.
    pub fn drop_unheld_cached(&mut self) -> usize {
        let dropped = std::mem::take(&mut self.evictable);
        for &b in dropped.values() {
            let hash = self.hash_of[b as usize]
                .take()
                .expect("evictable block is cached");
            self.by_hash.remove(&hash);
            self.events.record(|| CacheEvent::Removed { hash });
            self.free_list.push(b);
        }
        dropped.len()
    }

    /// Blocks needed to hold `tokens` positions with `block_size` tokens per block.
    pub fn blocks_for(tokens: usize, block_size: usize) -> usize {
        tokens.div_ceil(block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::{HashMap, HashSet};

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
    fn a_flush_drops_unheld_cached_blocks_and_keeps_held_ones() {
        let mut a = BlockAllocator::new(4);
        let blocks = a.allocate(3).unwrap();
        for (i, &b) in blocks.iter().enumerate() {
            assert!(a.register(b, i as BlockHash + 1));
        }
        a.free(&blocks[1..]);
        assert_eq!((a.num_cached(), a.num_evictable()), (3, 2));
        assert_eq!(a.drop_unheld_cached(), 2);
        assert_eq!((a.num_cached(), a.num_evictable(), a.num_free()), (1, 0, 3));
        assert_eq!(a.lookup(1), Some(blocks[0]));
        assert_eq!(a.lookup(2), None);
        assert_eq!(a.allocate(3).map(|b| b.len()), Some(3));
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
        let mut rng = StdRng::seed_from_u64(0x9E37_79B9_7F4A_7C15);
        for round in 0..200 {
            let total = rng.random_range(1..=64);
            let mut a = BlockAllocator::new(total);
            let mut held: Vec<Vec<BlockId>> = Vec::new();
            for _ in 0..300 {
                if rng.random_bool(0.5) || held.is_empty() {
                    let n = rng.random_range(0..9);
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
                    let i = rng.random_range(0..held.len());
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

    #[test]
    fn cached_blocks_outlive_their_holders_until_evicted_lru() {
        let mut a = BlockAllocator::new(4);
        let x = a.allocate(2).unwrap(); // 0, 1
        let y = a.allocate(1).unwrap(); // 2
        assert!(a.register(x[0], 10));
        assert!(a.register(x[1], 11));
        assert!(a.register(y[0], 20));
        assert!(!a.register(y[0], 21), "already registered");
        a.free_table(&x); // releases 1 then 0: 1 is older
        a.free(&y);
        assert_eq!((a.num_free(), a.num_evictable(), a.num_cached()), (4, 3, 3));
        assert_eq!(a.usage(), 0.0, "evictable blocks are not in use");
        assert_eq!(a.lookup(10), Some(x[0]));
        // The plain free block goes first, then the least recently released: 1, 0, 2.
        assert_eq!(a.allocate(1).unwrap(), vec![3]);
        assert_eq!(a.allocate(1).unwrap(), vec![x[1]]);
        assert_eq!((a.lookup(11), a.cached_hash(x[1])), (None, None));
        assert_eq!(a.lookup(10), Some(x[0]), "the head survives its tail");
        assert_eq!(a.allocate(2).unwrap(), vec![x[0], y[0]]);
        assert_eq!((a.num_cached(), a.num_free()), (0, 0));
    }

    #[test]
    fn a_hit_takes_a_block_back_from_the_evictable_set() {
        let mut a = BlockAllocator::new(3);
        let x = a.allocate(1).unwrap();
        a.register(x[0], 7);
        a.free(&x);
        assert_eq!(a.num_free(), 3);
        let b = a.lookup(7).unwrap();
        a.acquire(b);
        assert_eq!((a.ref_count(b), a.num_free(), a.num_evictable()), (1, 2, 0));
        a.acquire(b); // a second sharer
        assert!(
            a.allocate(3).is_none(),
            "a held cached block is never evicted"
        );
        assert_eq!(a.allocate(2).unwrap().len(), 2);
        a.free(&[b]);
        assert_eq!(a.ref_count(b), 1);
        a.free(&[b]);
        assert_eq!((a.num_evictable(), a.lookup(7)), (1, Some(b)));
    }

    #[test]
    fn the_same_contents_are_cached_once() {
        let mut a = BlockAllocator::new(2);
        let x = a.allocate(2).unwrap();
        assert!(a.register(x[0], 5));
        assert!(!a.register(x[1], 5), "the first copy stays the cached one");
        a.free(&x);
        assert_eq!((a.num_evictable(), a.num_cached()), (1, 1));
    }

    #[test]
    #[should_panic(expected = "uncached")]
    fn acquiring_an_uncached_block_is_detected() {
        let mut a = BlockAllocator::new(2);
        let x = a.allocate(1).unwrap();
        a.acquire(x[0]);
    }

    /// Random allocate / register / hit / free with a prefix cache on a small pool: no
    /// allocation ever returns a block somebody holds, the cache index and the evictable set
    /// agree with the reference counts, and the books always balance.
    #[test]
    fn eviction_never_takes_a_held_block() {
        let mut rng = StdRng::seed_from_u64(0x2545_F491_4F6C_DD1D);
        for round in 0..200 {
            let total = rng.random_range(1..=24);
            let mut a = BlockAllocator::new(total);
            // Holders: each a list of blocks it holds one reference to.
            let mut held: Vec<Vec<BlockId>> = Vec::new();
            for _ in 0..400 {
                match rng.random_range(0..4) {
                    0 | 1 => {
                        let n = rng.random_range(0..5);
                        let before = a.num_free();
                        let holds = |b: BlockId| held.iter().flatten().any(|&h| h == b);
                        match a.allocate(n) {
                            Some(got) => {
                                for &b in &got {
                                    assert!(!holds(b), "round {round}: held block {b} reused");
                                    assert_eq!(a.cached_hash(b), None);
                                }
                                held.push(got);
                            }
                            None => assert!(n > before),
                        }
                    }
                    2 => {
                        // Register some held block under a small hash space (collisions
                        // included), or hit a random cached hash.
                        if rng.random_bool(0.5) {
                            if let Some(&b) = held.iter().flatten().next() {
                                a.register(b, rng.random_range(0..16));
                            }
                        } else if let Some(b) = a.lookup(rng.random_range(0..16)) {
                            a.acquire(b);
                            held.push(vec![b]);
                        }
                    }
                    _ if !held.is_empty() => {
                        let i = rng.random_range(0..held.len());
                        a.free_table(&held.swap_remove(i));
                    }
                    _ => {}
                }
                let mut refs: HashMap<BlockId, u32> = HashMap::new();
                for &b in held.iter().flatten() {
                    *refs.entry(b).or_default() += 1;
                }
                assert_eq!(a.num_used(), refs.len(), "round {round}");
                for b in 0..total as BlockId {
                    let r = refs.get(&b).copied().unwrap_or(0);
                    assert_eq!(a.ref_count(b), r, "round {round}: block {b}");
                    if let Some(h) = a.cached_hash(b) {
                        assert_eq!(a.lookup(h), Some(b));
                    }
                    if r > 1 {
                        assert!(a.cached_hash(b).is_some(), "only cached blocks are shared");
                    }
                }
                assert_eq!(
                    a.num_evictable(),
                    (0..total as BlockId)
                        .filter(|&b| a.ref_count(b) == 0 && a.cached_hash(b).is_some())
                        .count()
                );
            }
        }
    }
}
