//! How long the engine has been inside its current step, for `/health`.
//!
//! `/health` is answered by the HTTP runtime from flags, so it stays fast under load; but a
//! step that never returns (a hung kernel, a deadlock) would leave it answering 200 while
//! every request runs into its deadline. The engine stamps each step's start here and clears
//! it at the end; the server calls a step older than its limit a stalled engine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct StepWatch {
    epoch: Instant,
    /// Nanoseconds from `epoch` to the running step's start, plus one; 0 between steps.
    started: AtomicU64,
}

impl StepWatch {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            started: AtomicU64::new(0),
        }
    }

    /// Marks a step started until the returned guard is dropped.
    pub fn begin(&self) -> StepGuard<'_> {
        let nanos = self.epoch.elapsed().as_nanos() as u64 + 1;
        self.started.store(nanos, Ordering::Release);
        StepGuard(self)
    }

    /// How long the running step has run; `None` between steps.
    pub fn running_for(&self) -> Option<Duration> {
        match self.started.load(Ordering::Acquire) {
            0 => None,
            nanos => Some(
                self.epoch
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(nanos - 1)),
            ),
        }
    }
}

pub(crate) struct StepGuard<'a>(&'a StepWatch);

impl Drop for StepGuard<'_> {
    fn drop(&mut self) {
        self.0.started.store(0, Ordering::Release);
    }
}

/// Fault injection for the test of the watchdog: with `BRAID_FAULT_STALL_STEP=N:SECS` in the
/// environment, the engine loop's `N`th step (from 1) sleeps `SECS` seconds before its forward
/// (its requests already counted as running).
/// Unset, as in every normal run, it costs one load of a cached `None` per step.
pub(crate) fn injected_stall(step: u64) -> Option<Duration> {
    static STALL: std::sync::OnceLock<Option<(u64, f64)>> = std::sync::OnceLock::new();
    let &(at, secs) = STALL
        .get_or_init(|| {
            let v = std::env::var("BRAID_FAULT_STALL_STEP").ok()?;
            let (n, s) = v.split_once(':')?;
            Some((n.parse().ok()?, s.parse().ok()?))
        })
        .as_ref()?;
    (step == at).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_timed_only_while_it_runs() {
        let w = StepWatch::new();
        assert_eq!(w.running_for(), None);
        {
            let _step = w.begin();
            std::thread::sleep(Duration::from_millis(20));
            assert!(w.running_for().unwrap() >= Duration::from_millis(20));
        }
        assert_eq!(w.running_for(), None);
    }
}
