//! The latency target and the starvation guarantee: how much prompt a step may carry
//! next to the decodes.

mod common;

use braid_sched::step_headroom::StepHeadroom;
use braid_sched::{CostModel, Scheduler, SchedulerConfig, StepFeatures};
use common::{drain, prompt, small_cfg, step};
use std::time::Duration;

fn target_cfg(target_ms: u64) -> SchedulerConfig {
    SchedulerConfig {
        max_batched_tokens: 64,
        itl_target: Some(Duration::from_millis(target_ms)),
        starvation_after: Duration::from_secs(1000),
        ..small_cfg()
    }
}

#[test]
fn latency_target_limits_prefill_when_someone_decodes() {
    // 9.5 ms per step + 1 ms per prompt token + 1 ms per decode. Before any step is measured
    // a 50 ms target is planned to 1.1 / 1.25 of it (44 ms), which fits 32 tokens next to two
    // decodes (half a token of slack keeps float rounding out of the answer).
    let cost = CostModel::new([0.0095, 0.001, 0.001, 0.0]);
    let mut s = Scheduler::with_cost_model(target_cfg(50), cost.clone());
    s.add(1, prompt(1, 200), 3, 0.0);
    let (p, _) = step(&mut s, 0.0);
    assert_eq!(
        p.num_prefill_tokens(),
        64,
        "nobody decodes: the full token cap"
    );
    assert_eq!(p.planned_to_secs, None, "and the target does not apply");
    let mut s = Scheduler::with_cost_model(target_cfg(50), cost.clone());
    s.add(1, prompt(1, 2), 50, 0.0);
    s.add(2, prompt(2, 2), 50, 0.0);
    step(&mut s, 0.0);
    s.add(3, prompt(3, 200), 3, 0.0);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!((p.num_decodes(), p.num_prefill_tokens()), (2, 32));
    let share = StepHeadroom::TOLERATED / StepHeadroom::PRIOR_P99;
    assert_eq!(p.planned_to_secs, Some(0.050 * share));
    let predicted = p.predicted_secs.unwrap();
    assert!(predicted <= 0.044 + 1e-12, "predicted {predicted}");
    // A looser target gives more, never past the cap.
    let mut s2 = Scheduler::with_cost_model(target_cfg(500), cost.clone());
    s2.add(1, prompt(1, 2), 50, 0.0);
    step(&mut s2, 0.0);
    s2.add(3, prompt(3, 200), 3, 0.0);
    let (p, _) = step(&mut s2, 0.1);
    assert_eq!(p.num_tokens(), 64);
}

#[test]
fn latency_target_follows_the_fitted_model() {
    let mut s =
        Scheduler::with_cost_model(target_cfg(50), CostModel::new([0.010, 0.004, 0.001, 0.0]));
    s.add(1, prompt(1, 2), 200, 0.0);
    step(&mut s, 0.0);
    s.add(2, prompt(2, 250), 3, 0.0);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!(p.num_prefill_tokens(), 8, "(44 - 11) / 4 ms per token");
    // The machine turns out faster: 1 ms per prompt token.
    for k in 0..40 {
        let f = StepFeatures {
            prefill_tokens: k * 3 % 50,
            decode_seqs: 1 + k % 3,
            attended_tokens: 0,
            embed_tokens: 0,
        };
        let secs = 0.010 + 0.001 * f.prefill_tokens as f64 + 0.001 * f.decode_seqs as f64;
        s.observe_step(f, secs);
    }
    let (p, _) = step(&mut s, 0.2);
    let n = p.num_prefill_tokens();
    assert!((36..=39).contains(&n), "refitted budget {n}");
}

#[test]
fn tiny_slices_are_not_worth_scheduling_under_a_tight_target() {
    // 9.5 ms + 2 decodes = 11.5 ms; 17 ms, planned to 1.1 / 1.25 of it (14.96 ms), leaves 3
    // tokens < min_prefill_chunk (4).
    let cost = CostModel::new([0.0095, 0.001, 0.001, 0.0]);
    let mut s = Scheduler::with_cost_model(target_cfg(17), cost.clone());
    s.add(1, prompt(1, 2), 50, 0.0);
    s.add(2, prompt(2, 2), 50, 0.0);
    step(&mut s, 0.0);
    s.add(3, prompt(3, 100), 3, 0.0);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!(p.num_prefill_tokens(), 0);
    // ... unless the whole rest of the prompt is that small.
    let mut s = Scheduler::with_cost_model(target_cfg(17), cost.clone());
    s.add(1, prompt(1, 2), 50, 0.0);
    s.add(2, prompt(2, 2), 50, 0.0);
    step(&mut s, 0.0);
    s.add(4, prompt(4, 3), 3, 0.0);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!(p.num_prefill_tokens(), 3);
}

#[test]
fn starving_prompt_gets_min_chunk_past_the_target() {
    // Decodes alone exceed the target: prompts only move through the starvation guarantee.
    let cost = CostModel::new([0.200, 0.001, 0.0, 0.0]);
    let cfg = SchedulerConfig {
        itl_target: Some(Duration::from_millis(100)),
        starvation_after: Duration::from_secs(2),
        ..small_cfg()
    };
    let mut s = Scheduler::with_cost_model(cfg, cost);
    s.add(1, prompt(1, 2), 200, 0.0);
    step(&mut s, 0.0);
    s.add(2, prompt(2, 10), 5, 0.5);
    s.add(3, prompt(3, 10), 5, 0.6);
    let mut now = 0.5;
    while now < 2.45 {
        let (p, _) = step(&mut s, now);
        assert_eq!(p.num_prefill_tokens(), 0, "at {now}: not starving yet");
        now += 0.1;
    }
    // From 2.5 s on prompt 2 gets 4 tokens a step; prompt 3 (starving from 2.6 s) waits
    // its turn: one guaranteed slice per step.
    let (p, _) = step(&mut s, 2.5);
    assert_eq!(p.chunk(2).map(|c| c.len), Some(4));
    assert_eq!(s.sequence(2).unwrap().first_scheduled, Some(2.5));
    let (p, _) = step(&mut s, 2.7);
    assert_eq!((p.chunk(2).map(|c| c.len), p.chunk(3)), (Some(4), None));
    let (p, _) = step(&mut s, 2.8);
    assert_eq!(p.chunk(2).map(|c| (c.len, c.sample)), Some((2, true)));
    let (p, _) = step(&mut s, 2.9);
    assert_eq!(
        p.chunk(3).map(|c| c.len),
        Some(4),
        "then the next starving prompt"
    );
    assert_eq!(p.num_decodes(), 2);
    drain(&mut s, 3.0, 0.1);
}

#[test]
fn a_starving_prompt_moves_by_what_fits_the_target_not_by_a_fixed_slice() {
    // 40 ms of decodes, 4 ms a prompt token, a 55 ms target planned to 1.1 / 1.25 of it
    // (48.4 ms): two tokens fit, fewer than min_prefill_chunk (4), so a prompt only moves once
    // it starves, and then by as much as fits (2 tokens, 48 ms), not a fixed 4 (56 ms).
    let cost = CostModel::new([0.040, 0.004, 0.0, 0.0]);
    let cfg = SchedulerConfig {
        itl_target: Some(Duration::from_millis(55)),
        starvation_after: Duration::from_secs(1),
        ..small_cfg()
    };
    let mut s = Scheduler::with_cost_model(cfg, cost);
    s.add(1, prompt(1, 2), 200, 0.0);
    step(&mut s, 0.0);
    s.add(2, prompt(2, 12), 5, 0.1);
    let (p, _) = step(&mut s, 0.5);
    assert_eq!(p.num_prefill_tokens(), 0, "not starving yet");
    let (p, _) = step(&mut s, 1.2);
    assert_eq!(p.chunk(2).map(|c| c.len), Some(2));
    assert!(p.predicted_secs.unwrap() <= 0.0484 + 1e-9);
    drain(&mut s, 1.3, 0.1);
}

#[test]
fn a_long_prompt_gets_through_a_steady_stream_of_decodes_and_arrivals() {
    // Three decodes alone (90 ms + 3 x 5 ms) exceed the 100 ms target, and a short request
    // arrives behind the long prompt every step.
    let cost = CostModel::new([0.090, 0.001, 0.005, 0.0]);
    let cfg = SchedulerConfig {
        max_num_seqs: 8,
        max_batched_tokens: 64,
        num_blocks: 256,
        itl_target: Some(Duration::from_millis(100)),
        starvation_after: Duration::from_secs(1),
        min_prefill_chunk: 8,
        ..small_cfg()
    };
    let mut s = Scheduler::with_cost_model(cfg, cost);
    for id in 0..3 {
        s.add(id, prompt(id, 2), 200, 0.0);
    }
    step(&mut s, 0.0);
    s.add(99, prompt(99, 100), 1, 0.0);
    let mut now = 0.1;
    let mut next_id = 1000;
    loop {
        s.add(next_id, prompt(next_id, 2), 5, now);
        next_id += 1;
        let (p, done) = step(&mut s, now);
        assert_eq!(p.num_decodes(), 3, "the streams never stop");
        if done.contains(&99) {
            break;
        }
        now += 0.1;
        assert!(
            now < 1.0 + 0.1 * (100.0 / 8.0 + 2.0),
            "long prompt starved at {now}"
        );
    }
    println!("long prompt's first token at {now:.1} s");
    assert!(now >= 1.0, "it only moved through the starvation guarantee");
}

#[test]
fn steps_are_planned_to_the_share_of_the_target_the_cost_model_s_error_leaves() {
    let cost = CostModel::new([0.0095, 0.001, 0.001, 0.0]);
    let mut s = Scheduler::with_cost_model(target_cfg(50), cost);
    assert_eq!(
        s.target_share(),
        StepHeadroom::TOLERATED / StepHeadroom::PRIOR_P99,
        "before any step, the prior error"
    );
    // One sized step in twenty lands 30% over its prediction: its p99 is 1.3.
    let mixed = StepFeatures {
        prefill_tokens: 20,
        decode_seqs: 2,
        attended_tokens: 100,
        embed_tokens: 0,
    };
    for k in 0..300 {
        let predicted = s.cost_model().predict(mixed);
        s.observe_step(mixed, predicted * if k % 20 == 0 { 1.3 } else { 1.0 });
    }
    let share = s.target_share();
    assert!((share - 1.1 / 1.3).abs() < 1e-9, "share {share}");
    s.add(1, prompt(1, 2), 50, 0.0);
    s.add(2, prompt(2, 2), 50, 0.0);
    step(&mut s, 0.0);
    s.add(3, prompt(3, 200), 3, 0.0);
    let (p, _) = step(&mut s, 0.1);
    let predicted = p.predicted_secs.unwrap();
    assert_eq!(p.planned_to_secs, Some(0.050 * share));
    assert!(p.num_prefill_tokens() > 0);
    assert!(predicted <= 0.050 * share + 1e-12, "predicted {predicted}");
    assert!(
        predicted > 0.050 * share - 0.0011,
        "predicted {predicted}: the slice is as long as fits"
    );
    // Decode-only steps are not sized to the target and do not move the share.
    let decodes = StepFeatures {
        prefill_tokens: 0,
        decode_seqs: 2,
        attended_tokens: 100,
        embed_tokens: 0,
    };
    for _ in 0..300 {
        s.observe_step(decodes, 1.0);
    }
    assert_eq!(s.target_share(), share);
}
