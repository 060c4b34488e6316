//! Running the start-up calibration that braid-sched describes (`braid_sched::Calibration`):
//! the engine has the model and the clock, so it executes each step shape and times it.

use crate::engine::Engine;
use braid_model::BatchEntry;
use braid_sched::{Calibration, Scheduler};
use std::time::Instant;

impl Engine {
    /// Times the calibration steps and restarts the scheduler with the cost model fitted to
    /// them. Skipped when the pool is too small, abandoned if a step fails (the prior stays).
    pub(crate) fn calibrate(&mut self) {
        let Some(cal) = Calibration::new(&self.sched_cfg, self.model.config().vocab_size) else {
            return;
        };
        let t0 = Instant::now();
        let mut secs = Vec::with_capacity(cal.steps.len());
        let shared = self.shared.clone();
        for step in &cal.steps {
            // Timed steps like the loop's, so /health sees one that never returns.
            let _watch = shared.step.begin();
            let entries: Vec<BatchEntry> = step
                .iter()
                .map(|c| BatchEntry {
                    tokens: &cal.tokens[c.tokens.clone()],
                    start: c.start,
                    block_table: &cal.block_tables[c.slot],
                    sample: true,
                    all_logits: false,
                })
                .collect();
            let t = Instant::now();
            if self
                .model
                .model
                .forward(&entries, &mut self.kv, &mut self.ws)
                .is_err()
            {
                return;
            }
            secs.push(t.elapsed().as_secs_f64());
        }
        let cost = cal.fit(&secs);
        tracing::info!(secs = t0.elapsed().as_secs_f64(), coefficients = ?cost.coefficients(), "cost model calibrated");
        self.sched = Scheduler::with_cost_model(self.sched_cfg.clone(), cost);
    }
}
