//! Texts for the embedding model in the step plan: under the latency target next to the
//! decodes, in arrival order with prompts, and never starved.

mod common;

use braid_sched::{CostModel, EmbedText, Scheduler, SchedulerConfig, StepFeatures};
use common::{prompt, small_cfg, step};
use std::time::Duration;

fn cfg(target_ms: Option<u64>) -> SchedulerConfig {
    SchedulerConfig {
        max_batched_tokens: 1024,
        itl_target: target_ms.map(Duration::from_millis),
        starvation_after: Duration::from_secs(5),
        ..small_cfg()
    }
}

/// 9.5 ms a step, 1 ms a prompt token, 1 ms a decode, 0.1 ms an embedded token.
fn cost() -> CostModel {
    CostModel::new([0.0095, 0.001, 0.001, 0.0]).with_embed_prior(0.0001)
}

fn texts(s: &mut Scheduler, request: u64, lengths: &[usize], arrival: f64) {
    for (index, &tokens) in lengths.iter().enumerate() {
        s.add_embedding(EmbedText {
            request,
            index,
            tokens,
            arrival,
        });
    }
}

#[test]
fn alone_they_run_in_steps_of_the_token_cap_and_all_finish() {
    let mut s = Scheduler::with_cost_model(cfg(Some(50)), cost());
    let lengths: Vec<usize> = (0..100).map(|i| 5 + i % 40).collect();
    texts(&mut s, 1, &lengths, 0.0);
    let mut seen = [false; 100];
    for k in 0..100 {
        if s.num_embed_waiting() == 0 {
            break;
        }
        let (p, _) = step(&mut s, k as f64 * 0.01);
        assert!(
            p.num_embed_tokens() <= 1024,
            "{} padded tokens",
            p.num_embed_tokens()
        );
        assert_eq!(
            p.planned_to_secs, None,
            "nobody decodes: the target does not apply"
        );
        if let Some(b) = &p.embeddings {
            for t in &b.texts {
                assert!(!seen[t.index], "text {} embedded twice", t.index);
                seen[t.index] = true;
            }
        }
    }
    assert!(seen.iter().all(|&s| s), "every text embedded");
    assert!(s.is_idle());
}

#[test]
fn next_to_decodes_they_keep_the_step_under_the_target() {
    let mut s = Scheduler::with_cost_model(cfg(Some(50)), cost());
    s.add(1, prompt(1, 2), 100, 0.0);
    s.add(2, prompt(2, 2), 100, 0.0);
    step(&mut s, 0.0);
    texts(&mut s, 7, &[40; 50], 0.1);
    let (p, _) = step(&mut s, 0.1);
    assert_eq!(p.num_decodes(), 2);
    let planned = p.planned_to_secs.unwrap();
    // 44 ms planned: 11.5 ms of decodes leave room for 325 tokens, so 8 texts of 40.
    assert_eq!(p.num_embed_texts(), 8);
    assert!(p.predicted_secs.unwrap() <= planned + 1e-12);
    assert_eq!(StepFeatures::of(&p).embed_tokens, 320);
}

#[test]
fn prompts_and_texts_go_in_the_order_they_came() {
    // Texts first: they take the step's room, and the later prompt gets what is left.
    let mut s = Scheduler::with_cost_model(cfg(Some(50)), cost());
    s.add(1, prompt(1, 2), 100, 0.0);
    step(&mut s, 0.0);
    texts(&mut s, 7, &[40; 50], 0.1);
    s.add(2, prompt(2, 200), 3, 0.2);
    let (p, _) = step(&mut s, 0.2);
    assert_eq!(p.num_embed_texts(), 8);
    assert_eq!(
        p.num_prefill_tokens(),
        0,
        "the 0.5 ms the texts leave is no slice worth its overhead"
    );
    // A prompt first: it takes the room, and the texts wait.
    let mut s = Scheduler::with_cost_model(cfg(Some(50)), cost());
    s.add(1, prompt(1, 2), 100, 0.0);
    step(&mut s, 0.0);
    s.add(2, prompt(2, 200), 3, 0.1);
    texts(&mut s, 7, &[40; 50], 0.2);
    let (p, _) = step(&mut s, 0.2);
    assert_eq!(p.num_prefill_tokens(), 33);
    assert_eq!(p.num_embed_texts(), 0);
}

#[test]
fn a_starving_text_runs_even_when_the_target_is_spent() {
    let mut s = Scheduler::with_cost_model(cfg(Some(20)), cost());
    s.add(1, prompt(1, 2), 1000, 0.0);
    step(&mut s, 0.0);
    s.add(2, prompt(2, 2000), 3, 0.1);
    texts(&mut s, 7, &[200], 0.2);
    let (p, _) = step(&mut s, 1.0);
    assert_eq!(
        p.num_embed_texts(),
        0,
        "the prompt came first and takes the room"
    );
    let (p, _) = step(&mut s, 5.3);
    assert_eq!(
        p.num_embed_texts(),
        1,
        "waiting past starvation_after, it runs anyway"
    );
}

#[test]
fn a_request_that_leaves_takes_its_waiting_texts() {
    let mut s = Scheduler::with_cost_model(cfg(None), cost());
    texts(&mut s, 1, &[10; 4], 0.0);
    texts(&mut s, 2, &[10; 4], 0.0);
    assert_eq!(s.abort_embedding(1), 4);
    let (p, _) = step(&mut s, 0.0);
    assert!(p
        .embeddings
        .iter()
        .flat_map(|b| &b.texts)
        .all(|t| t.request == 2));
    assert!(s.is_idle());
}

#[test]
fn steps_sized_with_texts_teach_the_headroom() {
    // Steps that embed next to decodes are sized to the target, so their error counts in the
    // share of the target later steps are planned to; decode-only steps' error does not.
    let texts = StepFeatures {
        decode_seqs: 2,
        embed_tokens: 100,
        ..StepFeatures::default()
    };
    let decodes = StepFeatures {
        decode_seqs: 2,
        ..StepFeatures::default()
    };
    let mut s = Scheduler::with_cost_model(cfg(Some(50)), cost());
    let before = s.target_share();
    for _ in 0..30 {
        s.observe_step(decodes, s.cost_model().predict(decodes) * 1.5);
    }
    assert_eq!(s.target_share(), before, "decode-only steps are not sized");
    for _ in 0..30 {
        s.observe_step(texts, s.cost_model().predict(texts) * 1.5);
    }
    let share = s.target_share();
    assert!(
        share < before,
        "1.5x over the prediction: {share} of the target, was {before}"
    );
}
