//! The stall braid exists to fix, reproduced in simulated time, and its fix.
//!
//! A synthetic step cost (8 ms + 1.6 ms per prompt token + 1 ms per decode row, ±3% jitter)
//! drives the planner: four streams decode 400 tokens each while three 1,200-token prompts
//! arrive 3 s apart. Reading such a prompt whole takes ~1.9 s, and every stream that was
//! mid-sentence waits for it. Braided (chunked prefill under a 100 ms target, with a cost
//! model fitted from the simulated steps, starting from a deliberately wrong prior), the
//! prompts are read in slices next to the decodes and no stream stops.

mod common;

use braid_sched::{CostModel, Scheduler, SchedulerConfig, SeqId, StepFeatures};
use common::{prompt, sample, Rng};
use std::collections::HashMap;
use std::time::Duration;

const STREAMS: SeqId = 4;
const STREAM_TOKENS: usize = 400;
const LONG_PROMPT: usize = 1200;

struct Request {
    id: SeqId,
    arrival: f64,
    prompt_len: usize,
    max_new: usize,
}

fn workload() -> Vec<Request> {
    let mut reqs: Vec<Request> = (0..STREAMS)
        .map(|id| Request {
            id,
            arrival: 0.0,
            prompt_len: 32,
            max_new: STREAM_TOKENS,
        })
        .collect();
    for k in 0..3 {
        reqs.push(Request {
            id: 100 + k,
            arrival: 1.0 + 3.0 * k as f64,
            prompt_len: LONG_PROMPT,
            max_new: 64,
        });
    }
    reqs
}

fn step_cost(f: StepFeatures) -> f64 {
    0.008 + 0.0016 * f.prefill_tokens as f64 + 0.001 * f.decode_seqs as f64
}

struct Outcome {
    /// Every inter-token gap of every stream (ITL), seconds.
    gaps: Vec<f64>,
    /// Worst gap of the four decoding streams.
    stream_worst_gap: f64,
    /// Time to first token of the long prompts.
    long_ttft: Vec<f64>,
    steps: usize,
    end: f64,
}

fn simulate(cfg: SchedulerConfig, cost: CostModel) -> Outcome {
    let mut s = Scheduler::with_cost_model(cfg, cost);
    let mut rng = Rng::new(42);
    let mut pending = workload();
    pending.reverse();
    let arrival: HashMap<SeqId, f64> = workload().iter().map(|r| (r.id, r.arrival)).collect();
    let mut token_times: HashMap<SeqId, Vec<f64>> = HashMap::new();
    let mut now = 0.0;
    let mut steps = 0;
    loop {
        while pending.last().is_some_and(|r| r.arrival <= now) {
            let r = pending.pop().unwrap();
            s.add(r.id, prompt(r.id, r.prompt_len), r.max_new, now);
        }
        let plan = s.plan(now);
        if plan.is_empty() {
            match pending.last() {
                Some(r) => {
                    now = r.arrival;
                    continue;
                }
                None => break,
            }
        }
        let features = StepFeatures::of(&plan);
        let secs = step_cost(features) * (1.0 + 0.06 * (rng.unit() - 0.5));
        now += secs;
        let sampled = sample(&plan);
        s.commit(&plan, &sampled);
        s.observe_step(features, secs);
        for (id, _) in sampled {
            token_times.entry(id).or_default().push(now);
        }
        steps += 1;
    }
    assert!(s.is_idle());
    let mut gaps = Vec::new();
    let mut stream_worst_gap: f64 = 0.0;
    for (id, times) in &token_times {
        let r = workload().into_iter().find(|r| r.id == *id).unwrap();
        assert_eq!(times.len(), r.max_new, "stream {id} got every token");
        for w in times.windows(2) {
            gaps.push(w[1] - w[0]);
            if *id < STREAMS {
                stream_worst_gap = stream_worst_gap.max(w[1] - w[0]);
            }
        }
    }
    gaps.sort_by(f64::total_cmp);
    let long_ttft = (100..103)
        .map(|id| token_times[&id][0] - arrival[&id])
        .collect();
    Outcome {
        gaps,
        stream_worst_gap,
        long_ttft,
        steps,
        end: now,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(name: &str, o: &Outcome) {
    println!(
        "{name:>9}: {} steps, {:.2} s; ITL p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
         (streams' worst {:.1} ms); long-prompt TTFT {}",
        o.steps,
        o.end,
        percentile(&o.gaps, 0.5) * 1e3,
        percentile(&o.gaps, 0.99) * 1e3,
        o.gaps.last().unwrap() * 1e3,
        o.stream_worst_gap * 1e3,
        o.long_ttft
            .iter()
            .map(|t| format!("{t:.2} s"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn base_cfg() -> SchedulerConfig {
    SchedulerConfig {
        block_size: 16,
        num_blocks: 1024,
        max_num_seqs: 32,
        max_model_len: 8192,
        // Every prompt is read, as the stall being measured needs.
        prefix_caching: false,
        ..SchedulerConfig::default()
    }
}

#[test]
fn whole_prompts_stall_the_streams() {
    let cfg = SchedulerConfig {
        chunked_prefill: false,
        itl_target: None,
        max_batched_tokens: 8192, // the whole prompt fits one step, as without chunking
        ..base_cfg()
    };
    let o = simulate(cfg, CostModel::default());
    report("unchunked", &o);
    assert!(
        o.stream_worst_gap > 1.0,
        "expected the stall, worst gap {}",
        o.stream_worst_gap
    );
    assert!(
        o.gaps.iter().filter(|&&g| g > 0.25).count() >= 3 * 4,
        "each prompt stalls all"
    );
}

#[test]
fn braided_prompts_keep_streams_moving() {
    let cfg = SchedulerConfig {
        chunked_prefill: true,
        itl_target: Some(Duration::from_millis(100)),
        max_batched_tokens: 512,
        ..base_cfg()
    };
    for (label, prior) in [
        ("optimist", [0.001, 0.0001, 0.0001, 0.0]), // 16x too cheap per prompt token
        ("pessimist", [0.05, 0.01, 0.01, 1e-6]),    // 6x too dear
    ] {
        let o = simulate(cfg.clone(), CostModel::new(prior));
        report(label, &o);
        let p99 = percentile(&o.gaps, 0.99);
        assert!(
            o.gaps.last().unwrap() <= &0.25,
            "{label}: a stall of {:?}",
            o.gaps.last()
        );
        assert!(p99 <= 0.150, "{label}: ITL p99 {p99}");
        for t in &o.long_ttft {
            assert!(*t < 4.0, "{label}: long prompt TTFT {t}");
        }
    }
}
