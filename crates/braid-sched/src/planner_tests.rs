//! Planner rules that need a hand-built state (reachable only through rare interleavings).

use super::*;
use crate::FinishReason;
use std::time::Duration;

fn cfg(num_blocks: usize) -> SchedulerConfig {
    SchedulerConfig {
        block_size: 4,
        num_blocks,
        max_num_seqs: 4,
        max_batched_tokens: 64,
        max_model_len: 64,
        chunked_prefill: true,
        itl_target: None,
        starvation_after: Duration::from_secs(2),
        min_prefill_chunk: 4,
        prefix_caching: false,
    }
}

/// Puts `id` in the running set as if `computed` tokens were already read.
fn force_running(s: &mut Scheduler, id: SeqId, state: SeqState, computed: usize) {
    s.waiting.retain(|&w| w != id);
    s.running.push(id);
    let blocks = s.allocator.allocate(computed.div_ceil(4)).unwrap();
    let seq = s.seqs.get_mut(&id).unwrap();
    seq.state = state;
    seq.num_computed = computed;
    seq.block_table = blocks;
    if state == SeqState::Decoding {
        seq.tokens.truncate(computed + 1);
        seq.prompt_len = computed;
    }
}

/// Commits `plan` with token 5 for every sampled chunk; returns who finished.
fn commit_fives(s: &mut Scheduler, plan: &StepPlan) -> Vec<FinishedSeq> {
    let sampled: Vec<_> = plan
        .chunks
        .iter()
        .filter(|c| c.sample)
        .map(|c| (c.seq, 5))
        .collect();
    s.commit(plan, &sampled)
}

fn run_to_idle(s: &mut Scheduler) {
    for k in 0..200 {
        if s.is_idle() {
            return;
        }
        let plan = s.plan(k as f64 * 0.01);
        assert!(!plan.is_empty());
        s.check_invariants().unwrap();
        for f in commit_fives(s, &plan) {
            assert_eq!(f.reason, FinishReason::Length);
        }
    }
    panic!("did not drain");
}

#[test]
fn a_scored_prompt_wants_every_rows_logits_in_bounded_slices_and_skips_the_prefix_cache() {
    let mut c = cfg(64);
    c.prefix_caching = true;
    c.max_batched_tokens = 256;
    c.max_model_len = 256;
    let mut s = Scheduler::new(c);
    let prompt: Vec<u32> = (0..150).map(|t| t % 50).collect();
    s.add(1, prompt.clone(), 1, 0.0);
    run_to_idle(&mut s);
    s.add(2, prompt.clone(), 1, 1.0);
    s.score_prompt(2);
    s.add(3, prompt, 1, 1.0);
    let plan = s.plan(2.0);
    let scored = plan.chunks.iter().find(|c| c.seq == 2).unwrap();
    assert!(scored.all_logits && scored.start == 0);
    assert_eq!(scored.len, Scheduler::SCORED_ROWS_PER_STEP);
    let cached = plan.chunks.iter().find(|c| c.seq == 3).unwrap();
    assert!(!cached.all_logits && cached.start > 0, "{cached:?}");
}

/// A scored prompt's rows are computed as generation computes them (f32), a prompt read for
/// generation's in bf16: its blocks must not be handed to one.
#[test]
fn a_scored_prompt_leaves_nothing_in_the_prefix_cache() {
    let mut c = cfg(64);
    c.prefix_caching = true;
    c.max_batched_tokens = 256;
    c.max_model_len = 256;
    let mut s = Scheduler::new(c);
    let prompt: Vec<u32> = (0..40).map(|t| t % 50).collect();
    s.add(1, prompt.clone(), 1, 0.0);
    s.score_prompt(1);
    run_to_idle(&mut s);
    s.add(2, prompt, 1, 1.0);
    let plan = s.plan(2.0);
    let read = plan.chunks.iter().find(|c| c.seq == 2).unwrap();
    assert_eq!(read.start, 0, "{read:?}");
    assert_eq!(plan.prefix_cache.hits, 0);
}

#[test]
fn a_choice_sharing_a_prompt_waits_for_it_then_starts_from_the_cached_blocks() {
    let mut c = cfg(64);
    c.prefix_caching = true;
    c.max_batched_tokens = 16;
    c.max_model_len = 128;
    let mut s = Scheduler::new(c);
    let prompt: Vec<u32> = (0..30).collect();
    s.add(1, prompt.clone(), 4, 0.0);
    s.add(2, prompt, 4, 0.0);
    s.share_prompt(2, 1);
    s.add(3, vec![7; 5], 4, 0.0);
    let mut starts = Vec::new();
    let mut copies = Vec::new();
    for k in 0..20 {
        let plan = s.plan(k as f64 * 0.01);
        for c in plan.chunks.iter().filter(|c| c.seq == 2 && !c.is_decode) {
            assert!(
                s.seqs[&1].num_computed >= 30,
                "2 ran before 1 read the prompt"
            );
            starts.push(c.start);
            assert_eq!(s.seqs[&2].block_table[..7], s.seqs[&1].block_table[..7]);
            copies.push((s.seqs[&1].block_table[7], s.seqs[&2].block_table[7]));
        }
        assert!(plan.block_copies.iter().all(|c| copies.contains(c)));
        commit_fives(&mut s, &plan);
        s.check_invariants().unwrap();
    }
    // Blocks of 4: the leader's seven full blocks are shared and its partial eighth (28..30)
    // copied; only the last prompt token is read again, for its logits.
    assert_eq!(starts, [29]);
    assert_eq!(copies.len(), 1);
    assert_ne!(copies[0].0, copies[0].1);
    assert!(s.is_idle());
}

#[test]
fn prompts_holding_the_pool_do_not_wait_on_each_other() {
    let mut s = Scheduler::new(cfg(4));
    s.add(1, vec![1; 16], 1, 0.0);
    s.add(2, vec![2; 16], 1, 0.0);
    force_running(&mut s, 1, SeqState::Prefilling, 8);
    force_running(&mut s, 2, SeqState::Prefilling, 8);
    assert_eq!(s.allocator.num_free(), 0);
    let plan = s.plan(0.0);
    assert_eq!(
        plan.preempted,
        vec![2],
        "the younger prompt yields its blocks"
    );
    assert_eq!(
        plan.chunk(1).map(|c| (c.start, c.len, c.sample)),
        Some((8, 8, true))
    );
    assert_eq!(s.waiting.front(), Some(&2));
    s.check_invariants().unwrap();
    let finished = s.commit(&plan, &[(1, 9)]);
    assert_eq!(finished.len(), 1, "its one token is out");
    assert_eq!(finished[0].seq.id, 1);
    run_to_idle(&mut s);
    assert_eq!(s.allocator.num_free(), 4);
}

#[test]
fn a_prompt_short_of_blocks_never_preempts_a_scheduled_decode() {
    let mut s = Scheduler::new(cfg(4));
    s.add(1, vec![1; 16], 1, 0.0);
    s.add(2, vec![2; 7], 3, 0.0);
    force_running(&mut s, 1, SeqState::Prefilling, 8);
    force_running(&mut s, 2, SeqState::Decoding, 6); // positions 6, 7 fit its 2 blocks
    let plan = s.plan(0.0);
    assert!(plan.preempted.is_empty());
    assert_eq!(
        plan.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(),
        vec![2]
    );
    s.commit(&plan, &[(2, 9)]);
    run_to_idle(&mut s);
    assert_eq!(
        s.num_preemptions(),
        0,
        "the decode finished and freed its blocks"
    );
}

#[test]
fn the_cache_event_log_tells_each_stored_block_once_and_each_eviction() {
    let mut c = cfg(6);
    c.prefix_caching = true;
    let mut s = Scheduler::new(c);
    assert!(s.take_cache_events().is_empty());
    s.enable_cache_events();
    // 9 prompt tokens + 2 generated: blocks of 4, so two full blocks are stored.
    s.add(1, (0..9).collect(), 2, 0.0);
    run_to_idle(&mut s);
    let events = s.take_cache_events();
    let stored: Vec<_> = events
        .iter()
        .map(|e| match e {
            CacheEvent::Stored {
                hash,
                parent,
                tokens,
            } => (*hash, *parent, tokens.clone()),
            _ => panic!("nothing evicted yet: {events:?}"),
        })
        .collect();
    assert_eq!(stored.len(), 2, "{events:?}");
    assert_eq!(stored[0].1, None);
    assert_eq!(stored[1].1, Some(stored[0].0), "chained to its predecessor");
    assert_eq!(stored[0].2, vec![0, 1, 2, 3]);
    assert_eq!(stored[1].2, vec![4, 5, 6, 7]);
    // The same prompt again hits both blocks: nothing new is stored.
    s.add(2, (0..9).collect(), 2, 1.0);
    run_to_idle(&mut s);
    assert!(s.take_cache_events().is_empty());
    // A prompt that needs the whole pool evicts them, and says so.
    s.add(3, (100..121).collect(), 2, 2.0);
    run_to_idle(&mut s);
    let removed: Vec<_> = s
        .take_cache_events()
        .into_iter()
        .filter_map(|e| match e {
            CacheEvent::Removed { hash } => Some(hash),
            _ => None,
        })
        .collect();
    assert_eq!(removed.len(), 2);
    assert!(removed.contains(&stored[0].0) && removed.contains(&stored[1].0));
    // A flush drops the rest, each one told.
    let cached = s.allocator.num_cached();
    assert!(cached > 0);
    assert_eq!(s.flush_prefix_cache(), cached);
    assert_eq!(s.take_cache_events().len(), cached);
}
