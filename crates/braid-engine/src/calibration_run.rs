//! Running the start-up calibration that braid-sched describes (`braid_sched::Calibration`):
//! the engine has the model and the clock, so it executes each step shape and times it.

use crate::engine::Engine;
use braid_model::BatchEntry;
use braid_sched::{Calibration, CostModel, Scheduler};
use std::time::Instant;

impl Engine {
    /// Times the calibration steps and restarts the scheduler with the cost model fitted to
    /// them, and the embedding model's cost per token measured. The generation steps are
    /// skipped when the pool is too small, abandoned if a step fails (the prior stays).
    pub(crate) fn calibrate(&mut self) {
        let cost = self.calibrate_generation().unwrap_or_default();
        let cost = match self.embed_secs_per_token() {
            Some(secs) => cost.with_embed_prior(secs),
            None => cost,
        };
        tracing::info!(coefficients = ?cost.coefficients(), "cost model calibrated");
        self.sched = Scheduler::with_cost_model(self.sched_cfg.clone(), cost);
        if let Some(draft) = self.draft.as_mut() {
            match draft.time_pass() {
                Ok(secs) => {
                    tracing::info!(secs, "draft model pass timed");
                    self.sched.observe_draft_passes(1, secs);
                }
                Err(e) => tracing::warn!("cannot time the draft model: {e}"),
            }
        }
    }

    /// The embedding model's seconds per token, from the faster of two batches of 8 texts of
    /// 64 tokens: the size of batch a step next to decodes runs.
    fn embed_secs_per_token(&self) -> Option<f64> {
        let embedder = self.embeddings.as_ref()?.embedder.as_ref()?;
        let text = "braid times its embedding model before it serves. ".repeat(16);
        let tokens = embedder
            .tokenize(&text, braid_embedding::Keep::First(64))
            .ok()?;
        let batch: Vec<&[u32]> = vec![tokens.as_slice(); 8];
        let shared = self.shared.clone();
        let mut best = f64::INFINITY;
        for _ in 0..2 {
            let _watch = shared.step.begin();
            let t = Instant::now();
            embedder.embed(&batch).ok()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        let secs = best / (batch.len() * tokens.len()) as f64;
        tracing::info!(secs_per_token = secs, "embedding model timed");
        Some(secs)
    }

    fn calibrate_generation(&mut self) -> Option<CostModel> {
        let model = self.model.clone()?;
        let cal = Calibration::new(&self.sched_cfg, model.config().vocab_size)?;
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
                    hidden: false,
                    // A decoding row follows its prompt; a prompt's rows are all prompt.
                    prompt_len: match c.is_decode {
                        true => c.start,
                        false => c.start + c.tokens.len(),
                    },
                })
                .collect();
            let t = Instant::now();
            let kv = self.kv.as_mut()?;
            if model.model.forward(&entries, kv, &mut self.ws).is_err() {
                return None;
            }
            secs.push(t.elapsed().as_secs_f64());
        }
        tracing::info!(secs = t0.elapsed().as_secs_f64(), "generation steps timed");
        Some(cal.fit(&secs))
    }
}
