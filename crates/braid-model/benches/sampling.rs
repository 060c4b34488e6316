//! `cargo bench -p braid-model --bench sampling`: what choosing one token costs, per row of
//! logits at the default model's vocabulary (49,152), for the settings clients send most:
//! greedy, temperature alone (the OpenAI API's default is 1), with top-p, and with top-k; and
//! scoring a given token with its 5 most likely alternatives (`logprobs`, `echo`, prompt
//! logprobs: lm-evaluation-harness scores every continuation token so).
//! A step samples each of its sequences once on the compute pool, so at 16 sequences on 2
//! threads eight of these run back to back after every forward.

use braid_model::sampling::{score_token, Sampler, SamplingParams};
use std::time::Instant;

const VOCAB: usize = 49_152;
const ROWS: usize = 400;

fn main() {
    // Logits shaped like a language model's: a few large, most far below.
    let logits: Vec<f32> = (0..VOCAB)
        .map(|i| {
            let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            -12.0 + (h % 1000) as f32 / 100.0 + if i % 997 == 0 { 8.0 } else { 0.0 }
        })
        .collect();
    let settings: [(&str, SamplingParams); 4] = [
        (
            "greedy",
            SamplingParams {
                temperature: 0.0,
                ..Default::default()
            },
        ),
        ("temperature 1", SamplingParams::default()),
        (
            "temperature 0.7, top_p 0.9",
            SamplingParams {
                temperature: 0.7,
                top_p: 0.9,
                ..Default::default()
            },
        ),
        (
            "temperature 0.7, top_k 40",
            SamplingParams {
                temperature: 0.7,
                top_k: 40,
                ..Default::default()
            },
        ),
    ];
    for (name, params) in settings {
        let mut sampler = Sampler::new(
            SamplingParams {
                seed: Some(7),
                ..params
            },
            &[],
        );
        let mut times = Vec::with_capacity(ROWS);
        for _ in 0..ROWS {
            let t = Instant::now();
            std::hint::black_box(sampler.sample(&logits));
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        report(name, times);
    }
    let mut scratch = Vec::new();
    let mut times = Vec::with_capacity(ROWS);
    for i in 0..ROWS {
        let t = Instant::now();
        std::hint::black_box(score_token(&logits, (i * 97) as u32, 5, &mut scratch));
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    report("a given token, top 5", times);
}

fn report(name: &str, mut times: Vec<f64>) {
    times.sort_by(f64::total_cmp);
    println!(
        "{name:28} median {:7.1} µs, p90 {:7.1} µs per row",
        times[ROWS / 2],
        times[ROWS * 9 / 10]
    );
}
