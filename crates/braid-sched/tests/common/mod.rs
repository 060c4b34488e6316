//! Helpers shared by the integration tests: a seeded RNG and a fake engine step.
#![allow(dead_code)]

use braid_sched::{BlockAllocator, Scheduler, SchedulerConfig, SeqId, StepPlan};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use std::time::Duration;

/// A seeded RNG: the same seed gives the same workload on every run and machine.
pub struct Rng(StdRng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(StdRng::seed_from_u64(seed))
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        self.0.random_range(lo..=hi)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.0.random()
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.0.random_bool(p)
    }
}

/// The token a fake model samples for sequence `id` at token index `pos`: deterministic, so a
/// recomputed sequence must reproduce exactly the tokens it had.
pub fn fake_token(id: SeqId, pos: usize) -> u32 {
    (id as u32).wrapping_mul(7919).wrapping_add(pos as u32 * 31) % 50_000
}

pub fn prompt(id: SeqId, len: usize) -> Vec<u32> {
    (0..len).map(|i| fake_token(id, i) ^ 1).collect()
}

/// A small config with no latency target; tests override what they exercise.
pub fn small_cfg() -> SchedulerConfig {
    SchedulerConfig {
        block_size: 4,
        num_blocks: 64,
        max_num_seqs: 4,
        max_batched_tokens: 16,
        max_model_len: 256,
        chunked_prefill: true,
        itl_target: None,
        starvation_after: Duration::from_secs(2),
        min_prefill_chunk: 4,
        prefix_caching: false,
    }
}

/// Checks a fresh plan against the scheduler: chunks start at `num_computed`, lie within the
/// tokens, are covered by the block table, `sample` marks exactly the chunks reaching the
/// end, decodes come first, no sequence appears twice, preempted ones have no chunk.
pub fn check_plan(s: &Scheduler, plan: &StepPlan) {
    let bs = s.config().block_size;
    let mut seen = std::collections::HashSet::new();
    let mut prefill_seen = false;
    for c in &plan.chunks {
        assert!(seen.insert(c.seq), "{} twice in one step", c.seq);
        assert!(c.len >= 1);
        let seq = s.sequence(c.seq).expect("planned sequence exists");
        assert_eq!(
            c.start, seq.num_computed,
            "chunk starts at the cache frontier"
        );
        assert!(c.start + c.len - c.drafted <= seq.tokens.len());
        assert!(
            c.drafted <= seq.draft.len(),
            "drafted rows beyond the draft"
        );
        assert!(
            seq.block_table.len() >= BlockAllocator::blocks_for(c.start + c.len, bs),
            "chunk {c:?} not covered by {} blocks",
            seq.block_table.len()
        );
        assert_eq!(c.sample, c.start + c.len - c.drafted == seq.tokens.len());
        if c.sample {
            assert!(seq.can_generate(), "would sample past max_new_tokens");
        }
        if c.is_decode {
            assert!(!prefill_seen, "decode after a prompt slice");
            assert_eq!(c.len, 1 + c.drafted);
        } else {
            prefill_seen = true;
        }
    }
    for p in &plan.preempted {
        assert!(plan.chunk(*p).is_none(), "preempted {p} still has a chunk");
    }
    assert!(s.allocator().num_used() <= s.allocator().num_blocks());
    s.check_invariants().unwrap();
}

/// Fake sampled tokens for every sampled chunk.
pub fn sample(plan: &StepPlan) -> Vec<(SeqId, u32)> {
    plan.chunks
        .iter()
        .filter(|c| c.sample)
        .map(|c| (c.seq, fake_token(c.seq, c.start + c.len)))
        .collect()
}

/// One engine step: plan, check, commit fake tokens, finish sequences that hit their limit.
/// Returns the plan and the ids finished.
pub fn step(s: &mut Scheduler, now: f64) -> (StepPlan, Vec<SeqId>) {
    let plan = s.plan(now);
    check_plan(s, &plan);
    let sampled = sample(&plan);
    let mut done = Vec::new();
    for f in s.commit(&plan, &sampled) {
        assert_eq!(f.reason, braid_sched::FinishReason::Length);
        assert_eq!(f.seq.num_generated(), f.seq.max_new_tokens);
        assert_generated_tokens(&f.seq);
        done.push(f.seq.id);
    }
    s.check_invariants().unwrap();
    (plan, done)
}

/// Every generated token is the one the fake model samples at that position.
pub fn assert_generated_tokens(seq: &braid_sched::Sequence) {
    for pos in seq.prompt_len..seq.tokens.len() {
        assert_eq!(
            seq.tokens[pos],
            fake_token(seq.id, pos),
            "seq {} pos {pos}",
            seq.id
        );
    }
}

/// Drives steps (time advancing `dt` per step) until idle; returns the steps taken.
pub fn drain(s: &mut Scheduler, mut now: f64, dt: f64) -> usize {
    let mut n = 0;
    while !s.is_idle() {
        let (plan, _) = step(s, now);
        assert!(!plan.is_empty(), "stuck: work left but nothing planned");
        now += dt;
        n += 1;
        assert!(n < 100_000, "no progress");
    }
    n
}
