//! How much of the latency target a step may be planned up to.
//!
//! The cost model is centred (its median error is close to zero) but not exact: at the 99th
//! percentile a step lands well over its prediction (`braid bench interference` reports the
//! error's distribution on each machine; docs/PERFORMANCE.md has the figures). A step planned
//! right up to the target therefore overshoots it by that much about once in a hundred steps, and the decoders' ITL p99 is the target times that error. Planning to
//! `target × TOLERATED / q99(measured / predicted)` instead keeps the steps the planner
//! sizes within [`StepHeadroom::TOLERATED`] times the target in 99 of 100, on whatever
//! machine runs them: the margin is learned from the error this machine shows, not guessed.
//!
//! Only steps that read a prompt or embed texts next to decodes count: those are the steps sized to the
//! target; a decode-only step has nothing to shrink. That makes them few: at a long target a
//! long prompt is read in a handful of steps, so a run can end before the first twenty are
//! seen. Until then the planner assumes the error's p99 is [`StepHeadroom::PRIOR_P99`] (or the
//! worst ratio seen so far, if higher), rather than that the model is exact: planned to the
//! whole target, the first prompts' steps landed over it, once by a stall (the run is in
//! docs/benchmarks/HISTORY.md, 2026-12-04 night).

use std::collections::VecDeque;

#[derive(Clone, Debug, Default)]
pub struct StepHeadroom {
    /// Measured / predicted seconds of the latest sized steps, oldest first.
    ratios: VecDeque<f64>,
}

impl StepHeadroom {
    /// Steps remembered: enough for a 99th percentile, recent enough to follow a machine
    /// whose load changes.
    pub const WINDOW: usize = 300;
    /// Steps needed before their p99 is trusted; until then [`Self::PRIOR_P99`] stands in.
    pub const MIN_STEPS: usize = 20;
    /// The error's p99 assumed before [`Self::MIN_STEPS`] sized steps are seen: the top of the
    /// range `braid bench interference` measured on the machines of docs/PERFORMANCE.md.
    pub const PRIOR_P99: f64 = 1.25;
    /// How far over the target a sized step may land in the 99th percentile.
    pub const TOLERATED: f64 = 1.1;
    /// The least share of the target a step is planned to: a stretch of descheduled steps
    /// must slow prompts down, not stop them.
    pub const MIN_SHARE: f64 = 0.8;

    /// A sized step's prediction and what it measured.
    pub fn observe(&mut self, predicted_secs: f64, measured_secs: f64) {
        if !(predicted_secs > 0.0 && measured_secs.is_finite()) {
            return;
        }
        if self.ratios.len() == Self::WINDOW {
            self.ratios.pop_front();
        }
        self.ratios.push_back(measured_secs / predicted_secs);
    }

    /// The share of the target to plan steps to, in `MIN_SHARE..=1`.
    pub fn share(&self) -> f64 {
        let p99 = if self.ratios.len() < Self::MIN_STEPS {
            self.ratios.iter().copied().fold(Self::PRIOR_P99, f64::max)
        } else {
            let mut sorted: Vec<f64> = self.ratios.iter().copied().collect();
            sorted.sort_by(f64::total_cmp);
            sorted[((sorted.len() - 1) as f64 * 0.99).round() as usize]
        };
        (Self::TOLERATED / p99).clamp(Self::MIN_SHARE, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(ratios: impl IntoIterator<Item = f64>) -> StepHeadroom {
        let mut h = StepHeadroom::default();
        for r in ratios {
            h.observe(0.1, 0.1 * r);
        }
        h
    }

    #[test]
    fn accurate_predictions_plan_to_the_whole_target() {
        let h = with((0..300).map(|i| 0.9 + 0.2 * (i % 10) as f64 / 10.0));
        assert_eq!(h.share(), 1.0);
    }

    #[test]
    fn before_enough_steps_the_prior_error_or_the_worst_seen_sets_the_share() {
        let prior = StepHeadroom::TOLERATED / StepHeadroom::PRIOR_P99;
        assert_eq!(StepHeadroom::default().share(), prior);
        assert_eq!(with([1.0; 10]).share(), prior, "too few steps to judge");
        let h = with([1.0, 1.3, 1.0]);
        assert!((h.share() - 1.1 / 1.3).abs() < 1e-9, "{}", h.share());
        assert_eq!(
            with([1.0; 20]).share(),
            1.0,
            "twenty accurate steps are trusted"
        );
    }

    #[test]
    fn a_tail_of_slow_steps_shrinks_the_planned_share_within_bounds() {
        // 5% of steps 30% over: their p99 is 1.3, so steps are planned to 1.1 / 1.3.
        let h = with((0..300).map(|i| if i % 20 == 0 { 1.3 } else { 1.0 }));
        assert!((h.share() - 1.1 / 1.3).abs() < 1e-9, "{}", h.share());
        let h = with((0..300).map(|i| if i % 10 == 0 { 3.0 } else { 1.0 }));
        assert_eq!(h.share(), StepHeadroom::MIN_SHARE);
    }

    #[test]
    fn old_steps_leave_the_window() {
        let mut h = with((0..300).map(|i| if i % 20 == 0 { 1.3 } else { 1.0 }));
        for _ in 0..StepHeadroom::WINDOW {
            h.observe(0.1, 0.1);
        }
        assert_eq!(h.share(), 1.0);
        h.observe(0.0, 1.0);
        h.observe(0.1, f64::NAN);
        assert_eq!(h.ratios.len(), StepHeadroom::WINDOW);
    }
}
