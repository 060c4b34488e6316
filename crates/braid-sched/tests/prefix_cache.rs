//! Prefix caching against a fake KV pool that remembers what was written where.
//!
//! The fake engine stores, for every (block, slot) it writes, a fingerprint of the whole
//! token prefix that produced that position's K/V (as the real model's K/V depend on every
//! token before). Before each chunk it checks that every position the chunk attends to
//! (`0..start`, through the sequence's block table) holds the fingerprint of the sequence's
//! *own* prefix. A cache hit on the wrong block, a block evicted or reallocated while still in
//! use, or a shared block written again all show up as a wrong fingerprint.

mod common;

use braid_sched::{BlockAllocator, BlockId, Scheduler, SchedulerConfig, SeqId, StepPlan};
use common::{check_plan, prompt, Rng};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

fn fingerprint(prefix: &[u32]) -> u64 {
    let mut h = DefaultHasher::new();
    prefix.hash(&mut h);
    h.finish()
}

/// The token the fake model samples after `prefix`: a function of the content alone, so two
/// sequences with the same tokens generate the same continuation (like greedy decoding).
fn next_token(prefix: &[u32]) -> u32 {
    (fingerprint(prefix) % 50_000) as u32
}

struct FakeKv {
    block_size: usize,
    slots: HashMap<(BlockId, usize), u64>,
    /// Positions read from the cache instead of computed.
    checked_reads: usize,
}

impl FakeKv {
    fn new(block_size: usize) -> Self {
        Self {
            block_size,
            slots: HashMap::new(),
            checked_reads: 0,
        }
    }

    /// Runs `plan` the way the model would: check what each chunk attends to, write its rows.
    fn run(&mut self, s: &Scheduler, plan: &StepPlan) -> Vec<(SeqId, u32)> {
        let bs = self.block_size;
        let mut sampled = Vec::new();
        for c in &plan.chunks {
            let seq = s.sequence(c.seq).unwrap();
            for pos in 0..c.start {
                let slot = (seq.block_table[pos / bs], pos % bs);
                assert_eq!(
                    self.slots.get(&slot),
                    Some(&fingerprint(&seq.tokens[..=pos])),
                    "seq {} reads position {pos} from block {} holding other K/V",
                    c.seq,
                    slot.0
                );
            }
            self.checked_reads += c.start;
            for pos in c.range() {
                let slot = (seq.block_table[pos / bs], pos % bs);
                self.slots.insert(slot, fingerprint(&seq.tokens[..=pos]));
            }
            if c.sample {
                sampled.push((c.seq, next_token(&seq.tokens[..c.start + c.len])));
            }
        }
        sampled
    }
}

fn cfg(num_blocks: usize) -> SchedulerConfig {
    SchedulerConfig {
        num_blocks,
        max_batched_tokens: 32,
        prefix_caching: true,
        ..common::small_cfg()
    }
}

/// Steps until idle; returns every finished sequence's generated tokens.
fn drain(s: &mut Scheduler, kv: &mut FakeKv) -> HashMap<SeqId, Vec<u32>> {
    let mut out = HashMap::new();
    for k in 0..10_000 {
        if s.is_idle() {
            return out;
        }
        let plan = s.plan(k as f64 * 0.01);
        check_plan(s, &plan);
        let sampled = kv.run(s, &plan);
        for f in s.commit(&plan, &sampled) {
            out.insert(f.seq.id, f.seq.tokens[f.seq.prompt_len..].to_vec());
        }
        s.check_invariants().unwrap();
    }
    panic!("did not drain");
}

#[test]
fn a_shared_prefix_is_read_once_and_the_output_is_unchanged() {
    let system = prompt(1, 37); // 9 full blocks of 4 and a partial one
    let ask = |tail: u64| [system.clone(), prompt(tail, 5)].concat();

    let mut s = Scheduler::new(cfg(64));
    let mut kv = FakeKv::new(4);
    s.add(10, ask(10), 6, 0.0);
    let first = drain(&mut s, &mut kv);
    assert_eq!(s.prefix_cache_stats().hits, 0);
    assert_eq!(s.prefix_cache_stats().queries, 42);
    assert_eq!(s.allocator().num_used(), 0);
    assert!(
        s.allocator().num_evictable() >= 10,
        "its blocks stay cached"
    );

    // Same system prompt, different question: the 9 full shared blocks are found.
    s.add(11, ask(11), 6, 0.0);
    let plan = s.plan(1.0);
    assert_eq!(
        plan.chunks[0].start, 36,
        "reads only past the cached blocks"
    );
    assert_eq!(s.sequence(11).unwrap().cached_tokens, 36);
    assert_eq!(s.prefix_cache_stats().hits, 36);
    assert_eq!(s.prefix_cache_stats().queries, 84);
    let sampled = kv.run(&s, &plan);
    s.commit(&plan, &sampled);
    drain(&mut s, &mut kv);

    // The very same request again: everything but the last token is cached, and its greedy
    // output equals the uncached one.
    s.add(12, ask(10), 6, 0.0);
    let plan = s.plan(2.0);
    assert_eq!((plan.chunks[0].start, plan.chunks[0].len), (40, 2));
    let sampled = kv.run(&s, &plan);
    s.commit(&plan, &sampled);
    let again = drain(&mut s, &mut kv);
    assert_eq!(again[&12], first[&10]);

    // Without the cache every token is read, and the answers are the same.
    let mut plain = Scheduler::new(SchedulerConfig {
        prefix_caching: false,
        ..cfg(64)
    });
    let mut kv2 = FakeKv::new(4);
    plain.add(12, ask(10), 6, 0.0);
    let plan = plain.plan(0.0);
    assert_eq!(plan.chunks[0].start, 0);
    let sampled = kv2.run(&plain, &plan);
    plain.commit(&plan, &sampled);
    assert_eq!(drain(&mut plain, &mut kv2)[&12], first[&10]);
    assert_eq!(plain.prefix_cache_stats(), Default::default());
    assert_eq!(plain.allocator().num_cached(), 0);
}

#[test]
fn a_block_aligned_prompt_still_computes_its_last_token() {
    let mut s = Scheduler::new(cfg(16));
    let mut kv = FakeKv::new(4);
    let p = prompt(3, 8);
    s.add(1, p.clone(), 1, 0.0);
    drain(&mut s, &mut kv);
    s.add(2, p, 1, 0.0);
    let plan = s.plan(1.0);
    // Both blocks are cached, but the last one is recomputed into a fresh block, so a shared
    // block is never written.
    assert_eq!((plan.chunks[0].start, plan.chunks[0].len), (4, 4));
    assert!(plan.chunks[0].sample);
}

#[test]
fn generated_tokens_are_cached_for_the_next_turn() {
    let mut s = Scheduler::new(cfg(32));
    let mut kv = FakeKv::new(4);
    let p = prompt(5, 10);
    s.add(1, p.clone(), 12, 0.0);
    let answer = drain(&mut s, &mut kv).remove(&1).unwrap();
    // The next turn: previous prompt + answer + a new message. Positions 0..=20 were computed
    // (the last answer token never is), so 5 full blocks = 20 tokens are found.
    let next = [p, answer, prompt(6, 3)].concat();
    s.add(2, next, 1, 1.0);
    assert_eq!(s.plan(1.0).chunks[0].start, 20);
}

#[test]
fn a_head_that_cannot_be_admitted_gives_its_hits_back() {
    let mut s = Scheduler::new(SchedulerConfig {
        max_num_seqs: 2,
        ..cfg(7)
    });
    let mut kv = FakeKv::new(4);
    let p = prompt(1, 9);
    s.add(1, p.clone(), 1, 0.0);
    drain(&mut s, &mut kv); // 2 full blocks cached, its third block free
    s.add(2, prompt(2, 16), 5, 0.0); // 5 free blocks after 4 of its 5 tokens
    for k in 0..4 {
        let plan = s.plan(k as f64);
        let sampled = kv.run(&s, &plan);
        s.commit(&plan, &sampled);
    }
    assert_eq!(s.allocator().num_used(), 5);
    let before = s.prefix_cache_stats();
    s.add(3, [p.clone(), p].concat(), 4, 1.0); // finds 2 blocks, needs 5
    let plan = s.plan(1.0);
    assert!(plan.chunk(3).is_none(), "not enough blocks to admit it");
    assert_eq!(s.sequence(3).unwrap().block_table, Vec::<BlockId>::new());
    assert_eq!(
        s.prefix_cache_stats(),
        before,
        "a lookup counts on admission only"
    );
    s.check_invariants().unwrap();
    let sampled = kv.run(&s, &plan);
    let finished = s.commit(&plan, &sampled);
    assert_eq!(finished.len(), 1, "its last token is out");
    assert_eq!(finished[0].seq.id, 2);
    drain(&mut s, &mut kv);
    assert_eq!(s.prefix_cache_stats().hits, before.hits + 8);
}

#[test]
fn a_preempted_sequence_finds_its_own_blocks_again() {
    // Each needs 8 + 12 - 1 = 19 positions = 5 blocks; the pool has 6, so one is preempted.
    let mut s = Scheduler::new(SchedulerConfig {
        max_batched_tokens: 32,
        ..cfg(6)
    });
    let mut kv = FakeKv::new(4);
    s.add(1, prompt(1, 8), 12, 0.0);
    s.add(2, prompt(2, 8), 12, 0.0);
    let out = drain(&mut s, &mut kv);
    assert!(s.num_preemptions() > 0);
    assert!(
        s.prefix_cache_stats().hits > 0,
        "re-admission reuses blocks"
    );
    for id in [1, 2] {
        let mut alone = Scheduler::new(cfg(64));
        let mut kv = FakeKv::new(4);
        alone.add(id, prompt(id, 8), 12, 0.0);
        assert_eq!(drain(&mut alone, &mut kv)[&id], out[&id], "seq {id}");
    }
}

/// Many requests sharing a few system prompts on a pool too small for all of them: blocks
/// are shared, evicted, found again, preempted and aborted (also between plan and commit),
/// and no sequence ever attends to a block that holds somebody else's K/V.
#[test]
fn a_full_pool_never_evicts_a_block_in_use() {
    let mut total_hits = 0;
    let mut total_reads = 0;
    let mut seeds_evicting = 0;
    for seed in 0..120 {
        let mut rng = Rng::new(seed);
        let bs = [1, 2, 4, 8][rng.range(0, 3)];
        let num_blocks = rng.range(48 / bs, 200 / bs).max(4);
        let mut s = Scheduler::new(SchedulerConfig {
            block_size: bs,
            num_blocks,
            max_num_seqs: rng.range(1, 6),
            max_batched_tokens: 32,
            chunked_prefill: rng.chance(0.8),
            ..cfg(num_blocks)
        });
        let mut kv = FakeKv::new(bs);
        let systems: Vec<Vec<u32>> = (0..3).map(|i| prompt(100 + i, 40)).collect();
        let mut expected: HashMap<SeqId, Vec<u32>> = HashMap::new();
        let mut next_id = 1;
        let mut evictions_seen = false;
        for k in 0..3000 {
            if next_id < 60 && rng.chance(0.3) {
                let sys = &systems[rng.range(0, 2)];
                let shared = rng.range(0, sys.len());
                let tokens = [&sys[..shared], &prompt(next_id, rng.range(1, 12))].concat();
                let max_new = rng.range(1, 10);
                let need = BlockAllocator::blocks_for(tokens.len() + max_new - 1, bs);
                if need <= num_blocks {
                    s.add(next_id, tokens.clone(), max_new, 0.0);
                    expected.insert(next_id, tokens);
                }
                next_id += 1;
            }
            if s.is_idle() {
                if next_id >= 60 {
                    break;
                }
                continue;
            }
            let cached_before = s.allocator().num_cached();
            let plan = s.plan(k as f64 * 0.01);
            check_plan(&s, &plan);
            if s.allocator().num_cached() < cached_before {
                evictions_seen = true;
            }
            let sampled = kv.run(&s, &plan);
            if rng.chance(0.03) {
                if let Some(&id) = s.running_ids().first() {
                    s.abort(id);
                    expected.remove(&id);
                }
            }
            for f in s.commit(&plan, &sampled) {
                // The continuation is a function of the tokens alone, whoever's blocks
                // were read: recompute it from scratch and compare.
                let (id, seq) = (f.seq.id, f.seq);
                let mut toks = expected.remove(&id).unwrap();
                for _ in 0..seq.max_new_tokens {
                    toks.push(next_token(&toks));
                }
                assert_eq!(seq.tokens, toks, "seed {seed}: seq {id}");
            }
            s.check_invariants()
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
        assert!(s.is_idle(), "seed {seed}: did not drain");
        assert_eq!(s.allocator().num_used(), 0);
        total_hits += s.prefix_cache_stats().hits;
        total_reads += kv.checked_reads;
        seeds_evicting += usize::from(evictions_seen);
    }
    println!("{total_hits} hit tokens, {total_reads} positions read from the cache checked, evictions in {seeds_evicting} of 120 runs");
    assert!(total_hits > 5_000, "shared prompts hit: {total_hits}");
    assert!(
        seeds_evicting > 30,
        "the pools should be too small to keep everything"
    );
}
