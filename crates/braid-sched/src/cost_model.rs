//! How long will a step take? Learned from the steps the engine actually ran.
//!
//! The latency target is only as good as this prediction: the planner sizes each step's
//! prompt slice so the predicted step time stays under the target, and a wrong model means
//! either stalls (too optimistic) or slow prompt reading (too pessimistic). The machine,
//! the model file and the thread count all change the numbers, so they are not configured
//! but fitted online from `(features, measured seconds)` pairs:
//!
//! `step_secs ≈ c0 + c1·prefill_tokens + c2·decode_seqs + c3·attended_tokens + c4·embed_tokens`
//!
//! (fixed per-step overhead; per prompt token, i.e. the arithmetic-bound matmul work; per
//! decode row; per (row, context position) pair, i.e. attention; per token of the embedding
//! model's batches, padding included, since padded rows are computed like any other).
//!
//! Choices, and why:
//! - **Windowed fit, one window per kind of step.** Steps are binned by whether they carry
//!   prompt tokens, decodes and/or embeddings, and each bin keeps its most recent observations. A long
//!   decode-only stretch therefore cannot push the last prompt-reading steps out of memory
//!   and leave `c1` unidentified exactly when the next long prompt arrives.
//! - **Relative error.** Each step is weighted by 1/secs², so a 12 ms decode step and a
//!   900 ms prompt step count alike; timing noise on a shared machine is roughly
//!   proportional to the step.
//! - **Robust to outliers.** A few iterations of Huber reweighting on the relative residuals
//!   (scale from the median absolute residual) keep a step that was descheduled by the OS
//!   from dragging the coefficients.
//! - **Non-negative coefficients.** With five unknowns the exact non-negative least squares
//!   solution is found by trying all 32 sets of free coefficients. Non-negativity keeps
//!   predictions monotone in every feature, which the planner's search relies on.
//! - **Prior as a weak anchor.** A small ridge pull toward the prior keeps a coefficient the
//!   data never excited (say, no prompt step seen yet) at its prior value instead of zero.
//!   The default prior is deliberately pessimistic: erring slow makes the first mixed steps
//!   read small prompt slices, which is safe, and the fit corrects it within a few steps.

use std::collections::VecDeque;

use crate::step_plan::StepPlan;

/// What a step costs is predicted from these counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepFeatures {
    /// Tokens read from prompts (including recomputation after preemption).
    pub prefill_tokens: usize,
    /// Decode rows (one token each).
    pub decode_seqs: usize,
    /// Sum over all rows of the context length each row attends to (itself included).
    pub attended_tokens: usize,
    /// Tokens the embedding model reads.
    pub embed_tokens: usize,
}

impl StepFeatures {
    /// Features of a planned step, computed from its chunks alone.
    pub fn of(plan: &StepPlan) -> Self {
        let mut f = Self::default();
        for c in &plan.chunks {
            f.add_chunk(c.start, c.len, c.is_decode);
        }
        f.embed_tokens = plan.num_embed_tokens();
        f
    }

    /// Adds one chunk: `len` rows at KV positions `start..start + len`.
    pub fn add_chunk(&mut self, start: usize, len: usize, is_decode: bool) {
        if is_decode {
            self.decode_seqs += len;
        } else {
            self.prefill_tokens += len;
        }
        self.attended_tokens += Self::chunk_attended(start, len);
    }

    /// Context attended by rows `start..start + len`: row `i` sees positions `0..=i`.
    pub fn chunk_attended(start: usize, len: usize) -> usize {
        len * start + len * (len + 1) / 2
    }

    fn with_chunk(mut self, start: usize, len: usize) -> Self {
        self.add_chunk(start, len, false);
        self
    }

    /// The same step with `tokens` more embedding tokens.
    pub fn with_embed_tokens(mut self, tokens: usize) -> Self {
        self.embed_tokens += tokens;
        self
    }

    fn scaled(self) -> [f64; N] {
        [
            1.0,
            self.prefill_tokens as f64 / SCALE[1],
            self.decode_seqs as f64 / SCALE[2],
            self.attended_tokens as f64 / SCALE[3],
            self.embed_tokens as f64 / SCALE[4],
        ]
    }

    fn kind(self) -> usize {
        usize::from(self.embed_tokens > 0) * 4
            + usize::from(self.prefill_tokens > 0) * 2
            + usize::from(self.decode_seqs > 0)
    }
}

/// Coefficients: the overhead and one per feature.
const N: usize = 5;
/// Kinds of step: with or without prompt tokens, decodes, embeddings.
const KINDS: usize = 8;
/// Features are divided by these before fitting so the normal equations are well scaled.
const SCALE: [f64; N] = [1.0, 100.0, 10.0, 100_000.0, 100.0];
/// Observations kept per kind of step.
const WINDOW_PER_KIND: usize = 64;
/// Huber threshold in robust standard deviations.
const HUBER_K: f64 = 1.5;
/// Smallest relative residual scale (1%): a near-perfect fit must not turn every small
/// wobble into an "outlier".
const MIN_REL_SCALE: f64 = 0.01;
/// Ridge pull toward the prior, relative to the data's own curvature per coefficient.
const RIDGE_REL: f64 = 1e-3;
/// Absolute ridge, so a coefficient with no data at all stays at its prior.
const RIDGE_ABS: f64 = 1e-9;
const IRLS_ITERATIONS: usize = 4;

#[derive(Clone, Copy, Debug)]
struct Observation {
    x: [f64; N],
    secs: f64,
}

/// Online-fitted step-time model; see the module docs.
#[derive(Clone, Debug)]
pub struct CostModel {
    prior: [f64; N],
    coef: [f64; N],
    windows: [VecDeque<Observation>; KINDS],
    num_observed: u64,
}

impl Default for CostModel {
    /// A pessimistic guess for a ~135M-parameter model on two CPU cores: 20 ms per step,
    /// 3 ms per prompt token, 2 ms per decode row, 0.1 µs per attended position.
    fn default() -> Self {
        Self::new([0.020, 0.003, 0.002, 1e-7])
    }
}

/// A pessimistic guess for a small BERT (all-MiniLM-L6-v2, 22M parameters in f32) on two
/// cores: 1 ms per embedded token. The engine measures its embedding model at start and
/// replaces it ([`CostModel::with_embed_prior`]).
pub const DEFAULT_EMBED_SECS_PER_TOKEN: f64 = 0.001;

impl CostModel {
    /// The same model, with `secs_per_token` as the embedding coefficient's prior and value
    /// (measured at start, before any step is observed).
    pub fn with_embed_prior(mut self, secs_per_token: f64) -> Self {
        let c = if secs_per_token.is_finite() {
            secs_per_token.max(0.0)
        } else {
            0.0
        };
        self.prior[4] = c;
        self.coef[4] = c;
        self
    }
}

impl CostModel {
    /// A model that predicts with `prior` (`[c0, c1, c2, c3]`, seconds) until it has data,
    /// and [`DEFAULT_EMBED_SECS_PER_TOKEN`] per embedded token.
    /// Negative or non-finite entries are taken as 0.
    pub fn new(prior: [f64; 4]) -> Self {
        let [c0, c1, c2, c3] = prior;
        let prior = [c0, c1, c2, c3, DEFAULT_EMBED_SECS_PER_TOKEN].map(|c| {
            if c.is_finite() {
                c.max(0.0)
            } else {
                0.0
            }
        });
        Self {
            prior,
            coef: prior,
            windows: Default::default(),
            num_observed: 0,
        }
    }

    /// Predicted seconds for a step with these features.
    pub fn predict(&self, f: StepFeatures) -> f64 {
        self.coef[0]
            + self.coef[1] * f.prefill_tokens as f64
            + self.coef[2] * f.decode_seqs as f64
            + self.coef[3] * f.attended_tokens as f64
            + self.coef[4] * f.embed_tokens as f64
    }

    /// Records a measured step and refits. Non-positive or non-finite times are ignored.
    pub fn observe(&mut self, f: StepFeatures, secs: f64) {
        if !secs.is_finite() || secs <= 0.0 {
            return;
        }
        let window = &mut self.windows[f.kind()];
        if window.len() == WINDOW_PER_KIND {
            window.pop_front();
        }
        window.push_back(Observation {
            x: f.scaled(),
            secs,
        });
        self.num_observed += 1;
        self.refit();
    }

    /// Current `[c0, c1, c2, c3, c4]` in seconds per unit of each feature.
    pub fn coefficients(&self) -> [f64; N] {
        self.coef
    }

    /// The prior it started from.
    pub fn prior(&self) -> [f64; N] {
        self.prior
    }

    /// Steps observed since creation.
    pub fn num_observations(&self) -> u64 {
        self.num_observed
    }

    /// How many prompt tokens (read from position 0 of one prompt) fit `target_secs` in a
    /// step that also carries `decode_seqs` decodes attending `attended_base` positions in
    /// total; at most `limit`.
    pub fn max_prefill_tokens(
        &self,
        decode_seqs: usize,
        attended_base: usize,
        target_secs: f64,
        limit: usize,
    ) -> usize {
        let base = StepFeatures {
            decode_seqs,
            attended_tokens: attended_base,
            ..StepFeatures::default()
        };
        self.max_chunk_len(base, 0, target_secs, limit)
    }

    /// The longest prompt slice starting at KV position `chunk_start` that can join a step
    /// already described by `base` while the predicted step time stays `<= target_secs`;
    /// at most `limit`. Monotone in `target_secs` and in `limit`.
    pub fn max_chunk_len(
        &self,
        base: StepFeatures,
        chunk_start: usize,
        target_secs: f64,
        limit: usize,
    ) -> usize {
        let fits = |n: usize| self.predict(base.with_chunk(chunk_start, n)) <= target_secs;
        if !fits(0) {
            return 0;
        }
        // Largest n in [0, limit] with fits(n): predict is non-decreasing in n.
        let (mut lo, mut hi) = (0usize, limit);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    fn refit(&mut self) {
        let obs: Vec<Observation> = self.windows.iter().flatten().copied().collect();
        let prior_scaled: [f64; N] = std::array::from_fn(|j| self.prior[j] * SCALE[j]);
        let mut robust = vec![1.0; obs.len()];
        let mut theta = prior_scaled;
        for _ in 0..IRLS_ITERATIONS {
            theta = fit_nonnegative(&obs, &robust, prior_scaled);
            let rel: Vec<f64> = obs
                .iter()
                .map(|o| (o.secs - dot(&theta, &o.x)) / o.secs)
                .collect();
            let mut abs: Vec<f64> = rel.iter().map(|r| r.abs()).collect();
            let scale = (1.4826 * median(&mut abs)).max(MIN_REL_SCALE);
            for (w, r) in robust.iter_mut().zip(&rel) {
                let z = r.abs() / scale;
                *w = if z <= HUBER_K { 1.0 } else { HUBER_K / z };
            }
        }
        self.coef = std::array::from_fn(|j| theta[j] / SCALE[j]);
    }
}

/// Non-negative ridge-anchored weighted least squares over the scaled features, solved
/// exactly by enumerating which coefficients are free (the rest pinned at 0).
#[allow(clippy::needless_range_loop)] // NxN matrix algebra reads best with indices
fn fit_nonnegative(obs: &[Observation], robust: &[f64], prior: [f64; N]) -> [f64; N] {
    let mut a = [[0.0f64; N]; N];
    let mut b = [0.0f64; N];
    let mut total_w = 0.0;
    for (o, r) in obs.iter().zip(robust) {
        let w = r / (o.secs * o.secs);
        total_w += w;
        for i in 0..N {
            let wx = w * o.x[i];
            b[i] += wx * o.secs;
            for j in i..N {
                a[i][j] += wx * o.x[j];
            }
        }
    }
    let norm = if total_w > 0.0 { 1.0 / total_w } else { 1.0 };
    for i in 0..N {
        b[i] *= norm;
        for j in i..N {
            a[i][j] *= norm;
            a[j][i] = a[i][j];
        }
    }
    let lambda: [f64; N] = std::array::from_fn(|j| RIDGE_REL * a[j][j] + RIDGE_ABS);
    // Objective up to a constant: θᵀAθ − 2bᵀθ + Σ λ_j (θ_j − p_j)².
    let objective = |t: &[f64; N]| {
        let mut v = 0.0;
        for i in 0..N {
            v += -2.0 * b[i] * t[i] + lambda[i] * (t[i] - prior[i]).powi(2);
            for j in 0..N {
                v += t[i] * a[i][j] * t[j];
            }
        }
        v
    };
    let mut best = [0.0; N];
    let mut best_val = objective(&best);
    for mask in 1u32..(1 << N) {
        let mut free = [0usize; N];
        let mut n = 0;
        for j in 0..N {
            if mask & (1 << j) != 0 {
                free[n] = j;
                n += 1;
            }
        }
        let mut m = [[0.0f64; N + 1]; N];
        for r in 0..n {
            let i = free[r];
            for c in 0..n {
                m[r][c] = a[i][free[c]];
            }
            m[r][r] += lambda[i];
            m[r][N] = b[i] + lambda[i] * prior[i];
        }
        let Some(sol) = solve(&mut m, n) else {
            continue;
        };
        if sol[..n].iter().any(|&v| v < 0.0 || !v.is_finite()) {
            continue;
        }
        let mut t = [0.0; N];
        for k in 0..n {
            t[free[k]] = sol[k];
        }
        let val = objective(&t);
        if val < best_val {
            best_val = val;
            best = t;
        }
    }
    best
}

/// Gaussian elimination with partial pivoting on the first `n` rows of an augmented
/// matrix whose right-hand side is column N.
#[allow(clippy::needless_range_loop)]
fn solve(m: &mut [[f64; N + 1]; N], n: usize) -> Option<[f64; N]> {
    for col in 0..n {
        let pivot = (col..n).max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))?;
        if m[pivot][col].abs() < 1e-300 {
            return None;
        }
        m.swap(col, pivot);
        for row in col + 1..n {
            let factor = m[row][col] / m[col][col];
            for k in col..n {
                m[row][k] -= factor * m[col][k];
            }
            m[row][N] -= factor * m[col][N];
        }
    }
    let mut x = [0.0; N];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|k| m[row][k] * x[k]).sum();
        x[row] = (m[row][N] - s) / m[row][row];
    }
    Some(x)
}

fn dot(a: &[f64; N], b: &[f64; N]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable_by(mid, f64::total_cmp).1
}
