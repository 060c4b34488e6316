//! Drafted tokens in the plan: verified rows give exactly the tokens plain decoding would, pay
//! for themselves by the cost model, and respect the limits, the target and the KV pool.

mod common;

use braid_sched::{
    CostModel, DraftSource, FinishReason, Scheduler, SchedulerConfig, SeqId, StepPlan,
};
use common::{assert_generated_tokens, check_plan, fake_token, prompt, small_cfg};
use std::time::Duration;

/// A draft for `id` whose first `right` tokens are what the fake model will sample.
fn draft(s: &Scheduler, id: SeqId, len: usize, right: usize) -> Vec<u32> {
    let next = s.sequence(id).unwrap().tokens.len();
    (0..len)
        .map(|i| {
            let t = fake_token(id, next + i);
            if i < right {
                t
            } else {
                t ^ 0xffff
            }
        })
        .collect()
}

/// What the engine does with a verified chunk: samples each row in order (the fake model's
/// token at that position) until a sample disagrees with the draft fed after it.
fn verify(s: &Scheduler, plan: &StepPlan) -> Vec<(SeqId, u32)> {
    let mut out = Vec::new();
    for c in plan.chunks.iter().filter(|c| c.sample) {
        let seq = s.sequence(c.seq).unwrap();
        let first = c.start + c.len - c.drafted;
        for i in 0..=c.drafted {
            let token = fake_token(c.seq, first + i);
            out.push((c.seq, token));
            if i == c.drafted || seq.draft[i] != token {
                break;
            }
        }
    }
    out
}

/// Runs every sequence to its end, drafting `len` tokens of which `right` are right before
/// every step; returns the steps taken and the tokens drafted in all.
fn run(s: &mut Scheduler, len: usize, right: usize) -> (usize, usize) {
    run_watching(s, len, right, |_, _, _| {})
}

/// [`run`], showing each step's plan (with its index) to `watch` before it is committed.
fn run_watching(
    s: &mut Scheduler,
    len: usize,
    right: usize,
    watch: impl FnMut(usize, &Scheduler, &StepPlan),
) -> (usize, usize) {
    run_from(s, DraftSource::Own, len, right, watch)
}

/// [`run_watching`], the drafts coming from `source`.
fn run_from(
    s: &mut Scheduler,
    source: DraftSource,
    len: usize,
    right: usize,
    mut watch: impl FnMut(usize, &Scheduler, &StepPlan),
) -> (usize, usize) {
    let (mut steps, mut drafted) = (0, 0);
    while !s.is_idle() {
        let ids: Vec<SeqId> = s.running_ids().to_vec();
        for id in ids {
            let d = draft(s, id, len, right);
            s.set_draft(id, d, source);
        }
        let plan = s.plan(steps as f64 * 0.01);
        check_plan(s, &plan);
        watch(steps, s, &plan);
        drafted += plan.num_drafted();
        let sampled = verify(s, &plan);
        for f in s.commit(&plan, &sampled) {
            assert_eq!(f.reason, FinishReason::Length);
            assert_eq!(f.seq.num_generated(), f.seq.max_new_tokens);
            assert_generated_tokens(&f.seq);
        }
        s.check_invariants().unwrap();
        steps += 1;
        assert!(steps < 1000, "did not drain");
    }
    (steps, drafted)
}

/// Roughly a small model on two cores: 4 ms a step, 1 ms more a row.
fn memory_bound() -> CostModel {
    CostModel::new([0.003, 0.001, 0.001, 1e-8])
}

fn scheduler(cfg: SchedulerConfig, sequences: u64, max_new: usize) -> Scheduler {
    let mut s = Scheduler::with_cost_model(cfg, memory_bound());
    for id in 0..sequences {
        s.add(id, prompt(id, 6), max_new, 0.0);
    }
    s
}

#[test]
fn right_drafts_give_the_same_tokens_in_fewer_steps() {
    let cfg = SchedulerConfig {
        max_batched_tokens: 64,
        ..small_cfg()
    };
    let (plain, _) = run(&mut scheduler(cfg.clone(), 1, 40), 0, 0);
    let (drafted_steps, drafted) = run(&mut scheduler(cfg, 1, 40), 8, 8);
    assert!(drafted > 0);
    assert!(
        drafted_steps * 3 < plain,
        "{drafted_steps} steps with right drafts, {plain} without"
    );
}

#[test]
fn wrong_drafts_stop_being_fed_but_for_a_rare_probe() {
    let cfg = SchedulerConfig {
        max_batched_tokens: 64,
        ..small_cfg()
    };
    let (mut early, mut late) = (0, 0);
    run_watching(&mut scheduler(cfg, 1, 200), 6, 0, |step, _, plan| {
        if step < 20 {
            early += plan.num_drafted();
        } else {
            late += plan.num_drafted();
        }
    });
    assert!(early > 0);
    // One drafted row now and then, lest the text turn to copying unseen: not one a step.
    assert!(
        (1..=180 / 10).contains(&late),
        "{late} drafted rows in 180 steps of drafts that always miss"
    );
}

#[test]
fn partly_right_drafts_keep_every_token_exact() {
    for right in 0..5 {
        let cfg = SchedulerConfig {
            max_batched_tokens: 64,
            ..small_cfg()
        };
        run(&mut scheduler(cfg, 3, 23), 6, right);
    }
}

#[test]
fn drafting_stops_when_rows_cost_more_than_they_give() {
    // Every row costs as much as the step's fixed part: arithmetic-bound, nothing to gain.
    let cfg = SchedulerConfig {
        max_batched_tokens: 64,
        ..small_cfg()
    };
    let mut s = Scheduler::with_cost_model(cfg, CostModel::new([0.001, 0.001, 0.001, 0.0]));
    for id in 0..4 {
        s.add(id, prompt(id, 6), 20, 0.0);
    }
    let (_, drafted) = run(&mut s, 8, 8);
    assert_eq!(drafted, 0);
}

#[test]
fn drafts_stay_inside_the_token_limit_and_the_context() {
    // A context of 10 after a prompt of 6 leaves 4 tokens, and drafts must not overrun it.
    let cfg = SchedulerConfig {
        max_batched_tokens: 64,
        max_model_len: 10,
        ..small_cfg()
    };
    run_watching(&mut scheduler(cfg, 2, 4), 8, 8, |_, s, plan| {
        for c in &plan.chunks {
            let seq = s.sequence(c.seq).unwrap();
            assert!(seq.num_generated() + 1 + c.drafted <= seq.max_new_tokens);
            assert!(seq.tokens.len() + 1 + c.drafted <= 10);
        }
    });
}

#[test]
fn drafts_keep_the_step_under_the_target() {
    // 20 ms fixed, 2 ms a row, a 30 ms target: a few rows of draft, not the eight that pay.
    let cfg = SchedulerConfig {
        max_batched_tokens: 64,
        itl_target: Some(Duration::from_millis(30)),
        ..small_cfg()
    };
    let mut s = Scheduler::with_cost_model(cfg, CostModel::new([0.020, 0.001, 0.002, 0.0]));
    s.add(0, prompt(0, 6), 40, 0.0);
    let mut most = 0;
    run_watching(&mut s, 8, 8, |_, s, plan| {
        if plan.chunks.iter().all(|c| c.is_decode) {
            assert!(plan.predicted_secs.unwrap() <= 0.030 * s.target_share() + 1e-9);
        }
        most = most.max(plan.num_drafted());
    });
    assert!((1..=4).contains(&most), "{most} drafted rows at most");
}

#[test]
fn drafts_never_preempt() {
    // 8 blocks of 4 hold two sequences of 6 + 10 tokens exactly: plain decoding never
    // preempts, and drafts, which never ask for a token past the limit, must not either.
    let cfg = SchedulerConfig {
        max_batched_tokens: 64,
        num_blocks: 8,
        ..small_cfg()
    };
    let mut s = scheduler(cfg, 2, 10);
    let (_, drafted) = run(&mut s, 8, 8);
    assert!(drafted > 0);
    assert_eq!(s.num_preemptions(), 0);
}

#[test]
fn a_step_verifies_a_bounded_number_of_drafted_rows() {
    // Rows nearly free and every draft right: only the per-step bound stops them.
    let cfg = SchedulerConfig {
        max_batched_tokens: 512,
        max_num_seqs: 32,
        num_blocks: 1024,
        ..small_cfg()
    };
    let mut s = Scheduler::with_cost_model(cfg, CostModel::new([0.020, 0.0, 1e-6, 0.0]));
    for id in 0..32 {
        s.add(id, prompt(id, 6), 40, 0.0);
    }
    let mut most = 0;
    run_watching(&mut s, 8, 8, |_, _, plan| {
        most = most.max(plan.num_drafted())
    });
    assert_eq!(most, Scheduler::DRAFTED_ROWS_PER_STEP);
}

#[test]
fn a_draft_models_further_passes_are_paid_for() {
    // Each token of a model's draft after its first takes one more pass of the draft model. A
    // pass a tenth of a step: long drafts. A pass as long as a step: only the first token,
    // which the pass that reads the step's positions gives anyway.
    let cfg = SchedulerConfig {
        max_batched_tokens: 64,
        ..small_cfg()
    };
    for (pass_secs, deepest_allowed) in [(0.0004, 4..=8), (0.004, 1..=1)] {
        let mut s = scheduler(cfg.clone(), 1, 40);
        s.observe_draft_passes(2, 2.0 * pass_secs);
        let mut deepest = 0;
        run_from(&mut s, DraftSource::Model, 8, 8, |_, _, plan| {
            deepest = plan
                .chunks
                .iter()
                .map(|c| c.drafted)
                .max()
                .unwrap_or(0)
                .max(deepest);
        });
        assert!(
            deepest_allowed.contains(&deepest),
            "a pass of {pass_secs} s: drafts {deepest} deep"
        );
    }
}
