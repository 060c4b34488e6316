//! The vocabulary-wide loops of choosing a token, in vectors: the largest logit, every token's
//! weight `e^((l - max)/T)`, and the draw among them.
//!
//! A sampled token used to cost one libm `expf` per entry of the vocabulary, a 49,152-entry
//! vector of (weight, token) pairs and a scan one subtraction at a time: 300 µs a row at
//! temperature 1 on an AMD EPYC (Zen 4), where a step of 16 sequences takes about 20 ms and
//! samples 8 rows on each of its 2 threads (`cargo bench -p braid-model --bench sampling`).
//! Here the loops run in the active kernel's float entry point, through braid's own
//! exponential, on 16 lanes; the draw finds its block of [`BLOCK`] tokens from the blocks'
//! sums first. Greedy decoding's argmax is here too: the largest value in lanes, then its
//! first index, which is the scalar loop's answer (lowest index on ties, NaN passed over).

use braid_kernels::exponential::exp_approx;
use braid_kernels::parallel_rows::in_float_loops;

const LANES: usize = 16;
/// Tokens per block of the draw's two-level scan.
const BLOCK: usize = 256;
/// Below this exponent braid's exponential stops at about 1e-38; a weight there is 0, so a
/// token the grammar masked (-inf) can never be drawn.
const LOWEST: f32 = -87.0;

/// The largest of `values` under `>` (NaN passed over, unless it is first).
#[inline(always)]
fn max_of(values: &[f32]) -> f32 {
    let Some(&first) = values.first() else {
        return f32::NEG_INFINITY;
    };
    let mut lanes = [first; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in chunks.by_ref() {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut m = lanes.iter().fold(first, |m, &v| if v > m { v } else { m });
    for &v in chunks.remainder() {
        m = if v > m { v } else { m };
    }
    m
}

/// `Σ f(v)` over `values`, in 16 lanes then the tail. Call it with an `#[inline(always)]`
/// closure, from inside the float loops: a closure kept out of line would be compiled for the
/// baseline CPU.
#[inline(always)]
fn lane_sum(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in chunks.by_ref() {
        for (s, &v) in lanes.iter_mut().zip(chunk) {
            *s += f(v);
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|&v| f(v)).sum();
    lanes.iter().sum::<f32>() + tail
}

/// The index of the largest value, the lowest on ties; values that are NaN are passed over
/// (and a NaN first value wins, as in a scalar loop that starts from it).
pub fn argmax(values: &[f32]) -> u32 {
    in_float_loops(
        #[inline(always)]
        || {
            let max = max_of(values);
            values.iter().position(|&v| v == max).unwrap_or(0) as u32
        },
    )
}

/// Every token's weight `e^((l - max) · inv_t)` into `weights`, 0 where the exponent is below
/// [`LOWEST`] or a logit is -inf. Returns `max`, the largest logit.
pub fn weights(logits: &[f32], inv_t: f32, weights: &mut Vec<f32>) -> f32 {
    weights.resize(logits.len(), 0.0);
    in_float_loops(
        #[inline(always)]
        || {
            let max = max_of(logits);
            for (w, &l) in weights.iter_mut().zip(logits) {
                let x = (l - max) * inv_t;
                *w = if x >= LOWEST { exp_approx(x) } else { 0.0 };
            }
            max
        },
    )
}

/// Sets the weights below `floor` to 0.
pub fn drop_below(weights: &mut [f32], floor: f32) {
    in_float_loops(
        #[inline(always)]
        || {
            for w in weights.iter_mut() {
                *w = if *w >= floor { *w } else { 0.0 };
            }
        },
    )
}

/// The sum of the weights, in lanes.
pub fn sum(weights: &[f32]) -> f32 {
    mass_at_least(weights, 0.0)
}

/// The sum of the weights of at least `floor`, in lanes.
fn mass_at_least(weights: &[f32], floor: f32) -> f32 {
    in_float_loops(
        #[inline(always)]
        || {
            lane_sum(
                weights,
                #[inline(always)]
                |w| if w >= floor { w } else { 0.0 },
            )
        },
    )
}

/// How many weights are at least `floor`.
fn count_at_least(weights: &[f32], floor: f32) -> usize {
    in_float_loops(
        #[inline(always)]
        || weights.iter().map(|&w| (w >= floor) as usize).sum(),
    )
}

/// The largest of the floors `floor(lo..=hi)` (rising with `i`) at which `enough` holds,
/// where `enough` holds at every floor below one at which it holds; `none` if it fails even
/// at `floor(lo)`. Eight passes over the values instead of a sort of them.
fn largest_floor(
    (mut lo, mut hi): (i32, i32),
    floor: impl Fn(i32) -> f32,
    enough: impl Fn(f32) -> bool,
    none: f32,
) -> f32 {
    if !enough(floor(lo)) {
        return none;
    }
    if enough(floor(hi)) {
        return floor(hi);
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if enough(floor(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    floor(lo)
}

/// 2^e for a normal exponent `e`.
fn power_of_two(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// A floor below which no token is among the `k` heaviest: the largest power of two that at
/// least `k` weights reach (0 if fewer than `k` weights are above 0).
pub fn floor_for_count(weights: &[f32], k: usize) -> f32 {
    let enough = |t| count_at_least(weights, t) >= k;
    largest_floor((-126, 0), power_of_two, enough, 0.0)
}

/// A floor below which no token is in the nucleus of mass `want`: the largest power of two
/// whose weights at or above it weigh at least `want` together.
pub fn floor_for_mass(weights: &[f32], want: f32) -> f32 {
    let enough = |t| mass_at_least(weights, t) >= want;
    largest_floor((-126, 0), power_of_two, enough, 0.0)
}

/// A floor below which no logit is among the `n` largest: the largest `max - d` (whole `d`
/// up to 128) that at least `n` logits reach; -inf if fewer reach `max - 128`.
pub fn logit_floor_for_count(logits: &[f32], max: f32, n: usize) -> f32 {
    let enough = |t| count_at_least(logits, t) >= n;
    largest_floor((-128, 0), |d| max + d as f32, enough, f32::NEG_INFINITY)
}

/// The largest logit and the log of the softmax's denominator, `max + ln Σ e^(l - max)`, with
/// the sum in lanes.
pub fn log_sum_exp(logits: &[f32]) -> (f32, f32) {
    in_float_loops(
        #[inline(always)]
        || {
            let max = max_of(logits);
            let sum = lane_sum(
                logits,
                #[inline(always)]
                |l| {
                    let x = l - max;
                    if x >= LOWEST {
                        exp_approx(x)
                    } else {
                        0.0
                    }
                },
            );
            (max, max + sum.ln())
        },
    )
}

/// Draws a token with probability proportional to its weight, from `fraction` in [0, 1): the
/// token where the running sum of weights passes `fraction` of their total. None if every
/// weight is 0.
pub fn draw(weights: &[f32], fraction: f32, sums: &mut Vec<f32>) -> Option<u32> {
    sums.clear();
    in_float_loops(
        #[inline(always)]
        || {
            for block in weights.chunks(BLOCK) {
                sums.push(lane_sum(
                    block,
                    #[inline(always)]
                    |w| w,
                ));
            }
        },
    );
    let total: f32 = sums.iter().sum();
    if total <= 0.0 || total.is_nan() {
        return None;
    }
    let mut u = fraction * total;
    // The block the draw falls in; rounding may leave `u` a little above 0 past the last one,
    // and then the draw is the last token with weight.
    let last_with_weight = || weights.iter().rposition(|&w| w > 0.0).map(|i| i as u32);
    let Some(b) = sums.iter().position(|&s| {
        let inside = u < s;
        if !inside {
            u -= s;
        }
        inside
    }) else {
        return last_with_weight();
    };
    let start = b * BLOCK;
    let block = &weights[start..(start + BLOCK).min(weights.len())];
    for (i, &w) in block.iter().enumerate() {
        if w > 0.0 {
            if u < w {
                return Some((start + i) as u32);
            }
            u -= w;
        }
    }
    // Rounding between the block's sum and its weights one by one: its last token with weight.
    block
        .iter()
        .rposition(|&w| w > 0.0)
        .map(|i| (start + i) as u32)
        .or_else(last_with_weight)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar_argmax(values: &[f32]) -> u32 {
        let mut best = 0;
        for (i, &l) in values.iter().enumerate() {
            if l > values[best] {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn argmax_is_the_scalar_loops_answer() {
        let mut cases: Vec<Vec<f32>> = vec![
            vec![],
            vec![1.0],
            vec![0.5, 2.0, 2.0],
            vec![-0.0, 0.0],
            vec![0.0, -0.0],
            vec![f32::NAN, 3.0, 1.0],
            vec![1.0, f32::NAN, 3.0, 3.0],
            vec![f32::NEG_INFINITY; 40],
        ];
        // Long rows with the largest value in every position of the lanes and the tail.
        for len in [15, 16, 17, 33, 49_152, 49_155] {
            for at in [0, 1, 15, 16, len / 2, len - 1]
                .into_iter()
                .filter(|&a| a < len)
            {
                let mut v: Vec<f32> = (0..len)
                    .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
                    .collect();
                v[at] = 50.0;
                cases.push(v.clone());
                // A tie after it.
                if at + 1 < len {
                    v[len - 1] = 50.0;
                    cases.push(v);
                }
            }
        }
        for v in &cases {
            let want = if v.is_empty() { 0 } else { scalar_argmax(v) };
            assert_eq!(argmax(v), want, "{v:?}");
        }
    }

    #[test]
    fn weights_are_the_exponentials_and_masked_tokens_weigh_nothing() {
        let logits = [1.0, 3.0, f32::NEG_INFINITY, -200.0, 2.0];
        let mut w = Vec::new();
        let max = weights(&logits, 1.0 / 0.5, &mut w);
        assert_eq!(max, 3.0);
        for (i, &l) in logits.iter().enumerate() {
            let want = ((l - 3.0) * 2.0).exp();
            assert!(
                (w[i] - want).abs() <= 2e-7 * want,
                "{i}: {} against {want}",
                w[i]
            );
        }
        assert_eq!(w[2], 0.0);
        assert_eq!(w[3], 0.0);
    }

    #[test]
    fn a_draw_lands_where_the_running_sum_passes_its_fraction() {
        // 1,000 tokens over several blocks, a third of them weightless.
        let w: Vec<f32> = (0..1000)
            .map(|i| {
                if i % 3 == 0 {
                    0.0
                } else {
                    (i % 7) as f32 + 0.5
                }
            })
            .collect();
        let total: f64 = w.iter().map(|&x| x as f64).sum();
        let mut sums = Vec::new();
        for k in 0..2000 {
            let fraction = k as f32 / 2000.0;
            let t = draw(&w, fraction, &mut sums).unwrap() as usize;
            assert!(w[t] > 0.0, "drew weightless token {t}");
            let before: f64 = w[..t].iter().map(|&x| x as f64).sum();
            let target = fraction as f64 * total;
            // The token whose span of the running sum holds the target, to the sums' rounding.
            assert!(
                before <= target + 1e-3 && target < before + w[t] as f64 + 1e-3,
                "{fraction}: token {t}"
            );
        }
        assert_eq!(draw(&[0.0; 300], 0.5, &mut sums), None);
        assert_eq!(draw(&[0.0, 0.0, 2.0], 0.999_999, &mut sums), Some(2));
    }

    #[test]
    fn the_floors_keep_every_token_the_filters_could_keep() {
        let w: Vec<f32> = (0..5000)
            .map(|i| {
                if i % 5 == 0 {
                    0.0
                } else {
                    1.0 / (1 + i % 613) as f32
                }
            })
            .collect();
        let mut sorted: Vec<f32> = w.iter().copied().filter(|&x| x > 0.0).collect();
        sorted.sort_by(|a, b| b.total_cmp(a));
        for k in [1, 2, 40, 999, 3999, 4000, 4001] {
            let floor = floor_for_count(&w, k);
            let reach = w.iter().filter(|&&x| x > 0.0 && x >= floor).count();
            assert!(reach >= k.min(sorted.len()), "k {k}: {reach} reach {floor}");
            // Tight: twice the floor leaves fewer than k.
            if floor > 0.0 && floor < 1.0 {
                assert!(w.iter().filter(|&&x| x >= 2.0 * floor).count() < k);
            }
        }
        let total: f32 = sorted.iter().sum();
        for top_p in [0.01, 0.5, 0.9, 0.999] {
            let want = top_p * total;
            let floor = floor_for_mass(&w, want);
            let mut acc = 0.0;
            let nucleus_end = sorted.iter().position(|&x| {
                acc += x;
                acc >= want
            });
            let smallest_in_nucleus = sorted[nucleus_end.unwrap_or(sorted.len() - 1)];
            assert!(
                smallest_in_nucleus >= floor,
                "top_p {top_p}: floor {floor} above {smallest_in_nucleus}"
            );
        }
        assert_eq!(floor_for_count(&[0.0, 0.0], 1), 0.0);
        let logits: Vec<f32> = (0..3000)
            .map(|i| ((i * 7919) % 3001) as f32 / 37.0 - 40.0)
            .collect();
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l));
        for n in [1, 5, 20, 2999, 3000] {
            let floor = logit_floor_for_count(&logits, max, n);
            assert!(logits.iter().filter(|&&l| l >= floor).count() >= n, "{n}");
        }
        assert_eq!(
            logit_floor_for_count(&[1.0, -500.0], 1.0, 2),
            f32::NEG_INFINITY
        );
        assert_eq!(floor_for_count(&[1.0, 0.5], 1), 1.0);
    }

    #[test]
    fn log_sum_exp_is_the_softmax_denominator() {
        let logits: Vec<f32> = (0..49_155)
            .map(|i| ((i * 7919) % 1000) as f32 / 60.0 - 9.0)
            .collect();
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(l)) as f64;
        let want = max
            + logits
                .iter()
                .map(|&l| (l as f64 - max).exp())
                .sum::<f64>()
                .ln();
        let (m, lse) = log_sum_exp(&logits);
        assert_eq!(m as f64, max);
        assert!((lse as f64 - want).abs() < 1e-5, "{lse} against {want}");
        assert_eq!(log_sum_exp(&[2.0, f32::NEG_INFINITY]), (2.0, 2.0));
    }

    #[test]
    fn drop_below_keeps_what_reaches_the_floor() {
        let mut w = vec![0.1, 0.3, 0.29, 1.0];
        drop_below(&mut w, 0.3);
        assert_eq!(w, [0.0, 0.3, 0.0, 1.0]);
    }
}
