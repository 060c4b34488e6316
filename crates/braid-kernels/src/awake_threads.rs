//! Keeps every compute thread looking for work for the length of one step.
//!
//! A step runs ~150 parallel loops, most of them a few tens of microseconds of work when few
//! rows decode. Between two loops a rayon worker with nothing to do yields ~30 times and then
//! sleeps; waking it again takes longer on a virtual machine than such a loop lasts, so the
//! thread that forked the loop ran both halves while its partner was still waking, and a lone
//! sequence's step used the second core for little of its work (`braid bench-engine --batch 1`
//! with `--threads 1` against `--threads 2` shows it; the measurement is in
//! docs/benchmarks/HISTORY.md, 2026-12-04 night). For the step's length the other
//! threads instead run a job that keeps stealing: it looks for pending work, and finding none,
//! yields to the OS and looks again, until the step is done. Between steps they sleep as before.
//!
//! A thread already inside a step (its own, or another engine's in the same process) returns
//! from such a job at once: spinning there could wait on a step buried beneath it on its own
//! stack, and two engines' steps could each wait for the other's.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static IN_STEP: Cell<bool> = const { Cell::new(false) };
}

/// Runs `step` on a compute thread while the pool's other threads look for its work.
pub fn run<R: Send>(step: impl FnOnce() -> R + Send) -> R {
    let done = AtomicBool::new(false);
    rayon::scope(|s| {
        let Some(_in_step) = InStep::enter() else {
            return step();
        };
        for _ in 1..rayon::current_num_threads() {
            s.spawn(|_| look_for_work(&done));
        }
        // Set on the way out even if the step panics, so the scope's wait ends.
        let _done = SetOnDrop(&done);
        step()
    })
}

fn look_for_work(done: &AtomicBool) {
    let Some(_in_step) = InStep::enter() else {
        return;
    };
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::thread::yield_now();
        }
    }
}

/// This thread's mark of being inside a step, cleared when dropped.
struct InStep;

impl InStep {
    /// Marks the thread, or `None` if it is inside a step already.
    fn enter() -> Option<Self> {
        (!IN_STEP.replace(true)).then_some(Self)
    }
}

impl Drop for InStep {
    fn drop(&mut self) {
        IN_STEP.set(false);
    }
}

struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn a_step_returns_its_result_and_its_loops_cover_every_item() {
        let sum = run(|| (0..10_000u64).into_par_iter().map(|i| i * i).sum::<u64>());
        assert_eq!(sum, (0..10_000u64).map(|i| i * i).sum::<u64>());
    }

    #[test]
    fn steps_from_many_threads_at_once_all_finish() {
        // Engines of several servers in one process step at the same time, each step many
        // short loops; a thread inside one step must never wait for another step beneath it.
        let step = |t: u64| {
            (0..20)
                .map(|_| (0..64u64).into_par_iter().map(|i| i + t).sum::<u64>())
                .sum::<u64>()
        };
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    for _ in 0..200 {
                        assert_eq!(run(|| step(t)), 20 * (0..64).map(|i| i + t).sum::<u64>());
                    }
                });
            }
        });
    }

    #[test]
    fn a_step_inside_a_step_runs_in_place() {
        assert_eq!(run(|| run(|| 7)), 7);
    }

    #[test]
    fn a_panicking_step_releases_the_other_threads() {
        let caught = std::panic::catch_unwind(|| run(|| panic!("step failed")));
        assert!(caught.is_err());
        assert_eq!(run(|| 1 + 1), 2);
    }
}
