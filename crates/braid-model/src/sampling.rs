//! Turning one row of logits into the next token, per request.
//!
//! Order as in vLLM: the request's logit biases and penalties on the raw logits, then a structured
//! output's grammar mask (what it does not allow is -inf), then temperature, then the min_p / top_k /
//! top_p filters, then a draw from a per-request RNG. A request with a seed owns its RNG, so its
//! output does not depend on what else runs in the same step. Reported logprobs are those of
//! the model's raw distribution, before any of the request's adjustments.

use crate::sampling_weights;
use braid_text::TokenConstraint;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means no limit.
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    /// HF-style: > 1 discourages any token already in the prompt or output.
    pub repetition_penalty: f32,
    /// OpenAI-style, on output tokens: subtracted once if present / per occurrence.
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub seed: Option<u64>,
    /// Number of alternatives to report with each token's logprob; None = no logprobs.
    pub logprobs: Option<usize>,
    /// Added to these tokens' logits before anything else (OpenAI's `logit_bias`); ids are
    /// inside the vocabulary (checked at validation).
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            logprobs: None,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    pub token: u32,
    /// Log-probability of `token` under the raw distribution (computed only when asked).
    pub logprob: Option<f32>,
    /// The most likely alternatives with their log-probabilities, best first.
    pub top: Vec<(u32, f32)>,
    /// A scored prompt token's place in the distribution: 1 + the tokens more likely.
    pub rank: Option<u32>,
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    /// Occurrences in the output (presence/frequency penalties).
    output_counts: HashMap<u32, u32>,
    /// Everything seen, prompt and output (repetition penalty).
    seen: std::collections::HashSet<u32>,
    scratch: Vec<(f32, u32)>,
    adjusted: Vec<f32>,
    /// Every token's weight for a draw, and the draw's sums of blocks of them.
    weights: Vec<f32>,
    block_sums: Vec<f32>,
    /// A structured output's grammar: masks what it does not allow, before anything else
    /// picks among the rest.
    constraint: Option<TokenConstraint>,
}

impl Sampler {
    pub fn new(params: SamplingParams, prompt: &[u32]) -> Self {
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        let seen = if params.repetition_penalty != 1.0 {
            prompt.iter().copied().collect()
        } else {
            Default::default()
        };
        Self {
            params,
            rng,
            output_counts: HashMap::new(),
            seen,
            scratch: Vec::new(),
            adjusted: Vec::new(),
            weights: Vec::new(),
            block_sums: Vec::new(),
            constraint: None,
        }
    }

    /// Keeps every token this sampler picks inside `constraint`'s grammar.
    pub fn with_constraint(mut self, constraint: Option<TokenConstraint>) -> Self {
        self.constraint = constraint;
        self
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Whether the next token's mask is worth computing ahead: constrained, and not in text
    /// a grammar leaves free (see `TokenConstraint::masks`).
    pub fn masks_next(&self) -> bool {
        self.constraint.as_ref().is_some_and(|c| c.masks())
    }

    /// Computes a structured output's next mask ahead of [`sample`](Self::sample), off the
    /// critical path (see [`TokenConstraint::prepare_mask`]).
    pub fn prepare_mask(&mut self) {
        if let Some(c) = &mut self.constraint {
            c.prepare_mask();
        }
    }

    /// Picks the next token and records it as part of the output.
    pub fn sample(&mut self, logits: &[f32]) -> Sampled {
        let p = self.params.clone();
        self.adjusted.clear();
        self.adjusted.extend_from_slice(logits);
        for &(t, bias) in &p.logit_bias {
            if let Some(l) = self.adjusted.get_mut(t as usize) {
                *l += bias;
            }
        }
        if p.repetition_penalty != 1.0 {
            for &t in &self.seen {
                if let Some(l) = self.adjusted.get_mut(t as usize) {
                    *l = if *l > 0.0 {
                        *l / p.repetition_penalty
                    } else {
                        *l * p.repetition_penalty
                    };
                }
            }
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            for (&t, &n) in &self.output_counts {
                if let Some(l) = self.adjusted.get_mut(t as usize) {
                    *l -= p.presence_penalty + p.frequency_penalty * n as f32;
                }
            }
        }
        if let Some(c) = &mut self.constraint {
            c.mask_logits(&mut self.adjusted);
        }
        let token = if p.is_greedy() {
            argmax(&self.adjusted)
        } else {
            self.draw()
        };
        if let Some(c) = &mut self.constraint {
            c.consume(token);
        }

        let (logprob, top) = match p.logprobs {
            Some(n) => {
                let (lp, top) = log_softmax_top(logits, token, n, &mut self.scratch);
                (Some(lp), top)
            }
            None => (None, Vec::new()),
        };
        *self.output_counts.entry(token).or_insert(0) += 1;
        if p.repetition_penalty != 1.0 {
            self.seen.insert(token);
        }
        Sampled {
            token,
            logprob,
            top,
            rank: None,
        }
    }

    fn draw(&mut self) -> u32 {
        let p = &self.params;
        let max = sampling_weights::weights(&self.adjusted, 1.0 / p.temperature, &mut self.weights);
        if !max.is_finite() {
            // Every token masked, or a logit that is not a number: nothing to weigh.
            return argmax(&self.adjusted);
        }
        if p.min_p > 0.0 {
            // The best token has weight 1 after subtracting the max.
            sampling_weights::drop_below(&mut self.weights, p.min_p);
        }
        if p.top_k == 0 && p.top_p >= 1.0 {
            let fraction = self.rng.random::<f32>();
            return sampling_weights::draw(&self.weights, fraction, &mut self.block_sums)
                .unwrap_or_else(|| argmax(&self.adjusted));
        }
        // Only tokens at or above a floor can survive top_k (or, without it, top_p): the
        // candidates are those, not the whole vocabulary.
        let total = (p.top_k == 0).then(|| sampling_weights::sum(&self.weights));
        let floor = match total {
            None => sampling_weights::floor_for_count(&self.weights, p.top_k),
            Some(total) => sampling_weights::floor_for_mass(&self.weights, p.top_p * total),
        };
        let cands = &mut self.scratch;
        cands.clear();
        cands.extend(
            self.weights
                .iter()
                .enumerate()
                .filter(|(_, &w)| w > 0.0 && w >= floor)
                .map(|(i, &w)| (w, i as u32)),
        );
        if p.top_k > 0 && p.top_k < cands.len() {
            cands.select_nth_unstable_by(p.top_k - 1, |a, b| b.0.total_cmp(&a.0));
            cands.truncate(p.top_k);
        }
        if p.top_p < 1.0 {
            let kept = total.unwrap_or_else(|| cands.iter().map(|c| c.0).sum());
            let want = p.top_p * kept;
            // Most of the mass sits in a few hundred tokens: sort those first, all only if needed.
            let head = 256.min(cands.len());
            if head < cands.len() {
                cands.select_nth_unstable_by(head - 1, |a, b| b.0.total_cmp(&a.0));
            }
            cands[..head].sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            if cands[..head].iter().map(|c| c.0).sum::<f32>() < want {
                cands.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            }
            let mut acc = 0.0;
            let mut keep = cands.len();
            for (i, c) in cands.iter().enumerate() {
                acc += c.0;
                if acc >= want {
                    keep = i + 1;
                    break;
                }
            }
            cands.truncate(keep);
        }
        let total: f32 = cands.iter().map(|c| c.0).sum();
        let mut u = self.rng.random::<f32>() * total;
        for c in cands.iter() {
            u -= c.0;
            if u <= 0.0 {
                return c.1;
            }
        }
        cands.last().map_or(0, |c| c.1)
    }
}

/// Index of the largest logit; the lowest index wins a tie, so greedy is deterministic.
pub fn argmax(logits: &[f32]) -> u32 {
    sampling_weights::argmax(logits)
}

/// Scores a token that was given rather than sampled (a prompt token, for `echo` with
/// `logprobs` or `prompt_logprobs`): its log-probability under `logits` and the `top` most
/// likely tokens. The same arithmetic as a sampled token's, so a token that is also the top
/// one carries the same number in both places (lm-evaluation-harness compares them).
pub fn score_token(
    logits: &[f32],
    token: u32,
    top: usize,
    scratch: &mut Vec<(f32, u32)>,
) -> Sampled {
    let (logprob, top) = log_softmax_top(logits, token, top, scratch);
    let own = logits[token as usize];
    let rank = 1 + logits.iter().filter(|&&l| l > own).count() as u32;
    Sampled {
        token,
        logprob: Some(logprob),
        top,
        rank: Some(rank),
    }
}

fn log_softmax_top(
    logits: &[f32],
    token: u32,
    n: usize,
    scratch: &mut Vec<(f32, u32)>,
) -> (f32, Vec<(u32, f32)>) {
    let (max, lse) = sampling_weights::log_sum_exp(logits);
    let lp = logits[token as usize] - lse;
    if n == 0 {
        return (lp, Vec::new());
    }
    // The `n` most likely are among the logits at or above this floor.
    let floor = sampling_weights::logit_floor_for_count(logits, max, n);
    scratch.clear();
    scratch.extend(
        logits
            .iter()
            .enumerate()
            .filter(|(_, &l)| l >= floor)
            .map(|(i, &l)| (l, i as u32)),
    );
    let n = n.min(scratch.len());
    scratch.select_nth_unstable_by(n - 1, |a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scratch.truncate(n);
    scratch.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    (lp, scratch.iter().map(|&(l, i)| (i, l - lse)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.0, -1.0, 2.9, 0.5]
    }

    #[test]
    fn a_scored_token_that_is_the_top_one_has_the_same_logprob_in_both_places() {
        let mut scratch = Vec::new();
        let s = score_token(&logits(), 1, 2, &mut scratch);
        assert_eq!(s.top[0].0, 1);
        assert_eq!(s.logprob, Some(s.top[0].1));
        assert_eq!(s.rank, Some(1));
        let other = score_token(&logits(), 3, 1, &mut scratch);
        assert_eq!(other.rank, Some(6));
        assert_eq!(score_token(&logits(), 4, 0, &mut scratch).rank, Some(2));
        assert!(other.logprob.unwrap() < other.top[0].1);
        let total: f32 = logits().iter().map(|&l| (l - 3.0).exp()).sum();
        assert!((other.logprob.unwrap() - (-4.0 - total.ln())).abs() < 1e-5);
    }

    #[test]
    fn greedy_takes_the_max_and_lowest_index_on_ties() {
        let mut s = Sampler::new(SamplingParams::greedy(), &[]);
        assert_eq!(s.sample(&logits()).token, 1);
        assert_eq!(argmax(&[0.5, 2.0, 2.0]), 1);
    }

    #[test]
    fn logit_bias_moves_the_choice_but_not_the_reported_logprobs() {
        let biased = SamplingParams {
            logit_bias: vec![(1, -100.0), (5, 3.0)],
            logprobs: Some(1),
            ..SamplingParams::greedy()
        };
        let mut s = Sampler::new(biased, &[]);
        let out = s.sample(&logits());
        assert_eq!(out.token, 5, "0.5 + 3 beats 2.9 once token 1 is banned");
        let mut plain = Sampler::new(
            SamplingParams {
                logprobs: Some(1),
                ..SamplingParams::greedy()
            },
            &[],
        );
        let reference = plain.sample(&logits());
        assert_eq!(out.top, reference.top, "logprobs are the model's own");
        let banned = SamplingParams {
            temperature: 1.0,
            seed: Some(3),
            logit_bias: vec![(1, -100.0), (4, -100.0), (2, -100.0)],
            ..Default::default()
        };
        let mut s = Sampler::new(banned, &[]);
        for _ in 0..200 {
            assert!(![1, 2, 4].contains(&s.sample(&logits()).token));
        }
    }

    #[test]
    fn same_seed_same_draws_different_seed_differs() {
        let params = SamplingParams {
            temperature: 1.5,
            seed: Some(7),
            ..Default::default()
        };
        let draw = |p: &SamplingParams| {
            let mut s = Sampler::new(p.clone(), &[]);
            (0..64)
                .map(|_| s.sample(&logits()).token)
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(&params), draw(&params));
        assert_ne!(
            draw(&params),
            draw(&SamplingParams {
                seed: Some(8),
                ..params.clone()
            })
        );
    }

    #[test]
    fn top_k_and_top_p_and_min_p_restrict_the_support() {
        let cases = [
            (
                SamplingParams {
                    temperature: 5.0,
                    top_k: 2,
                    seed: Some(1),
                    ..Default::default()
                },
                vec![1, 4],
            ),
            (
                SamplingParams {
                    temperature: 1.0,
                    top_p: 0.5,
                    seed: Some(2),
                    ..Default::default()
                },
                vec![1, 4],
            ),
            (
                SamplingParams {
                    temperature: 1.0,
                    min_p: 0.3,
                    seed: Some(3),
                    ..Default::default()
                },
                vec![1, 2, 4],
            ),
        ];
        for (params, allowed) in cases {
            let mut s = Sampler::new(params.clone(), &[]);
            let mut seen = std::collections::HashSet::new();
            for _ in 0..400 {
                let t = s.sample(&logits()).token;
                assert!(allowed.contains(&t), "{params:?} drew {t}");
                seen.insert(t);
            }
            assert_eq!(
                seen.len(),
                allowed.len(),
                "{params:?} never drew some allowed token"
            );
        }
    }

    #[test]
    fn penalties_move_greedy_away_from_used_tokens() {
        let mut s = Sampler::new(
            SamplingParams {
                presence_penalty: 0.5,
                ..SamplingParams::greedy()
            },
            &[],
        );
        assert_eq!(s.sample(&logits()).token, 1);
        assert_eq!(
            s.sample(&logits()).token,
            4,
            "presence penalty should demote token 1"
        );
        let mut r = Sampler::new(
            SamplingParams {
                repetition_penalty: 2.0,
                ..SamplingParams::greedy()
            },
            &[1],
        );
        assert_eq!(r.sample(&logits()).token, 4, "3.0 / 2 < 2.9");
        let mut f = Sampler::new(
            SamplingParams {
                frequency_penalty: 0.06,
                ..SamplingParams::greedy()
            },
            &[],
        );
        let toks: Vec<u32> = (0..4).map(|_| f.sample(&logits()).token).collect();
        assert_eq!(toks, vec![1, 1, 4, 1]);
    }

    #[test]
    fn logprobs_are_of_the_raw_distribution() {
        let mut s = Sampler::new(
            SamplingParams {
                logprobs: Some(2),
                ..SamplingParams::greedy()
            },
            &[],
        );
        let out = s.sample(&logits());
        let l = logits();
        let lse = l.iter().map(|x| x.exp()).sum::<f32>().ln();
        assert!((out.logprob.unwrap() - (3.0 - lse)).abs() < 1e-5);
        assert_eq!(out.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 4]);
        assert!((out.top[1].1 - (2.9 - lse)).abs() < 1e-5);
    }
}
