//! A fake engine drives the scheduler through random workloads on small KV pools: random
//! arrivals, prompt lengths, token limits, aborts (also between plan and commit), both
//! prefill modes, with and without a latency target. Every step is checked (decodes first,
//! chunks at the cache frontier and covered by blocks, no block shared, block tables add up
//! to the allocator's count, the token cap), and at the end every request that was not
//! aborted must have produced exactly its `max_new_tokens` tokens, each the one the fake
//! model sampled at that position, with the pool entirely free. Half the workloads cache
//! prefixes, and half their prompts start with a part of one shared "system prompt", so
//! cached blocks are shared, evicted and found again under preemption and aborts.

mod common;

use braid_sched::{CostModel, Scheduler, SchedulerConfig, SeqId, StepFeatures};
use common::{assert_generated_tokens, check_plan, prompt, sample, Rng};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

struct Arrival {
    id: SeqId,
    at: f64,
    prompt_len: usize,
    max_new: usize,
    /// Leading tokens taken from the shared system prompt.
    shared: usize,
}

fn random_config(rng: &mut Rng) -> SchedulerConfig {
    let max_num_seqs = rng.range(1, 8);
    SchedulerConfig {
        block_size: [1, 2, 4, 8, 16][rng.range(0, 4)],
        num_blocks: rng.range(4, 40),
        max_num_seqs,
        max_batched_tokens: rng.range(max_num_seqs, 64),
        max_model_len: 120,
        chunked_prefill: rng.chance(0.7),
        itl_target: rng
            .chance(0.5)
            .then(|| Duration::from_millis(rng.range(5, 60) as u64)),
        starvation_after: Duration::from_millis(rng.range(10, 500) as u64),
        min_prefill_chunk: rng.range(1, 16),
        prefix_caching: rng.chance(0.5),
    }
}

/// Synthetic step time: 2 ms + 0.2 ms per prompt token + 0.5 ms per decode, ±20%.
fn step_secs(f: StepFeatures, rng: &mut Rng) -> f64 {
    let base = 0.002 + 0.0002 * f.prefill_tokens as f64 + 0.0005 * f.decode_seqs as f64;
    base * (0.8 + 0.4 * rng.unit())
}

fn run(seed: u64) -> (usize, u64, u64) {
    let mut rng = Rng::new(seed);
    let cfg = random_config(&mut rng);
    let pool_tokens = cfg.num_blocks * cfg.block_size;
    let prior = [
        0.01 * rng.unit(),
        0.001 * rng.unit(),
        0.001 * rng.unit(),
        0.0,
    ];
    let mut s = Scheduler::with_cost_model(cfg.clone(), CostModel::new(prior));

    let mut t = 0.0;
    let mut arrivals: Vec<Arrival> = (0..rng.range(1, 40))
        .map(|i| {
            t += rng.unit() * 0.05;
            Arrival {
                id: 1000 + i as SeqId,
                at: t,
                prompt_len: rng.range(1, 70),
                max_new: rng.range(1, 50),
                shared: if rng.chance(0.5) { rng.range(0, 70) } else { 0 },
            }
        })
        .collect();
    arrivals.reverse(); // pop from the end = earliest first
    let system_prompt = prompt(7, 70);

    let mut accepted: HashMap<SeqId, usize> = HashMap::new();
    let mut aborted: HashSet<SeqId> = HashSet::new();
    let mut finished: HashSet<SeqId> = HashSet::new();
    let mut now = 0.0;
    let mut steps = 0;
    loop {
        while arrivals.last().is_some_and(|a| a.at <= now) {
            let a = arrivals.pop().unwrap();
            let mut tokens = prompt(a.id, a.prompt_len);
            let shared = a.shared.min(a.prompt_len);
            tokens[..shared].copy_from_slice(&system_prompt[..shared]);
            // What a front end refuses before it submits.
            if !cfg.admits(a.prompt_len, a.max_new) {
                match cfg.exceeds_kv_pool(a.prompt_len, a.max_new) {
                    Some(needed_tokens) => {
                        assert_eq!(needed_tokens, a.prompt_len + a.max_new - 1);
                        assert!(needed_tokens.div_ceil(cfg.block_size) > cfg.num_blocks);
                        assert!(needed_tokens > pool_tokens - cfg.block_size);
                    }
                    None => assert!(a.prompt_len + a.max_new > 120),
                }
                continue;
            }
            s.add(a.id, tokens, a.max_new, now);
            accepted.insert(a.id, a.max_new);
        }
        if rng.chance(0.05) {
            abort_random(&mut s, &mut rng, &accepted, &finished, &mut aborted);
        }
        if s.is_idle() {
            match arrivals.last() {
                Some(a) => {
                    now = a.at;
                    continue;
                }
                None => break,
            }
        }

        let plan = s.plan(now);
        assert!(
            !plan.is_empty(),
            "seed {seed}: work left but nothing planned"
        );
        check_plan(&s, &plan);
        let prefill_chunks = plan.chunks.iter().filter(|c| !c.is_decode).count();
        if cfg.chunked_prefill || prefill_chunks > 1 {
            assert!(
                plan.num_tokens() <= cfg.max_batched_tokens,
                "seed {seed}: cap broken"
            );
        }
        assert!(plan.chunks.len() <= cfg.max_num_seqs);

        if rng.chance(0.02) {
            // The client vanishes while the step runs.
            abort_random(&mut s, &mut rng, &accepted, &finished, &mut aborted);
        }
        let features = StepFeatures::of(&plan);
        let secs = step_secs(features, &mut rng);
        now += secs;
        let sampled = sample(&plan);
        let ended = s.commit(&plan, &sampled);
        s.observe_step(features, secs);
        for f in ended {
            assert_eq!(f.seq.num_generated(), f.seq.max_new_tokens);
            assert_generated_tokens(&f.seq);
            finished.insert(f.seq.id);
        }
        s.check_invariants().unwrap();
        steps += 1;
        assert!(steps < 50_000, "seed {seed}: no progress");
    }

    for id in accepted.keys() {
        assert!(
            finished.contains(id) != aborted.contains(id),
            "seed {seed}: {id} neither finished nor aborted (or both)"
        );
    }
    assert_eq!(
        s.allocator().num_free(),
        cfg.num_blocks,
        "seed {seed}: blocks leaked"
    );
    assert_eq!(s.kv_usage(), 0.0);
    (steps, s.num_preemptions(), s.prefix_cache_stats().hits)
}

fn abort_random(
    s: &mut Scheduler,
    rng: &mut Rng,
    accepted: &HashMap<SeqId, usize>,
    finished: &HashSet<SeqId>,
    aborted: &mut HashSet<SeqId>,
) {
    let live: Vec<SeqId> = {
        let mut v: Vec<_> = accepted
            .keys()
            .filter(|id| !finished.contains(id) && !aborted.contains(id))
            .copied()
            .collect();
        v.sort();
        v
    };
    if live.is_empty() {
        return;
    }
    let id = live[rng.range(0, live.len() - 1)];
    let used_before = s.allocator().num_used();
    let table = s.sequence(id).unwrap().block_table.clone();
    let sole = table
        .iter()
        .filter(|&&b| s.allocator().ref_count(b) == 1)
        .count();
    assert!(s.abort(id));
    assert_eq!(
        s.allocator().num_used(),
        used_before - sole,
        "abort frees at once (blocks it shared stay with their other holders)"
    );
    aborted.insert(id);
}

#[test]
fn random_workloads_complete_with_exact_token_counts() {
    let mut total_steps = 0;
    let mut total_preemptions = 0;
    let mut total_hits = 0;
    for seed in 0..300 {
        let (steps, preemptions, hits) = run(seed);
        total_steps += steps;
        total_preemptions += preemptions;
        total_hits += hits;
    }
    println!(
        "{total_steps} steps, {total_preemptions} preemptions, {total_hits} prefix-cache hit \
         tokens over 300 workloads"
    );
    assert!(total_hits > 1000, "shared prefixes should hit the cache");
    assert!(
        total_preemptions > 50,
        "the small pools should force preemptions"
    );
}
