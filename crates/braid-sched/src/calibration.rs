//! The steps timed at start-up, so the latency target is right from the first request.
//!
//! The cost model's default prior is deliberately pessimistic (see `cost_model.rs`): left to
//! learn from live traffic, the first mixed steps would read needlessly small prompt slices.
//! So before serving, the engine runs a few representative steps and the model is fitted to
//! their timings. Which steps, and how their timings become a cost model, belong next to the
//! cost model; the engine only executes the shapes described here (it has the model) and
//! times them (it has the clock).
//!
//! The shapes cover every kind of step the fit bins separately: prompt-only (64 and 128
//! tokens), decode-only (1, 4, 8 rows at context 64) and mixed (4 decodes with a 32- or
//! 128-token slice), on eight 256-token slots laid out in the KV pool's first blocks. The
//! scheduler starts afresh afterwards, so those blocks are simply free again.

use crate::block_allocator::BlockId;
use crate::config::SchedulerConfig;
use crate::cost_model::{CostModel, StepFeatures};

/// Tokens per calibration slot (one sequence's context).
const SLOT_TOKENS: usize = 256;
/// Slots: up to seven decoding sequences, the last one reading the prompt.
const SLOTS: usize = 8;
/// Context each decode row attends to.
const DECODE_CONTEXT: usize = 64;
/// (prompt tokens, decode rows) of each step, in the order they are run.
const STEPS: [(usize, usize); 7] = [(64, 0), (128, 0), (0, 1), (0, 4), (0, 8), (32, 4), (128, 4)];

/// One row group of a calibration step: feed `tokens[tokens]` at KV positions
/// `start..start + tokens.len()` of slot `slot`, and sample its last row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalibrationChunk {
    pub slot: usize,
    pub tokens: std::ops::Range<usize>,
    pub start: usize,
    pub is_decode: bool,
}

/// Every calibration step, its slots' block tables and its token ids.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub steps: Vec<Vec<CalibrationChunk>>,
    /// One block table per slot, over the pool's first blocks.
    pub block_tables: Vec<Vec<BlockId>>,
    /// The token ids chunks index into: a deterministic spread over the vocabulary.
    pub tokens: Vec<u32>,
}

impl Calibration {
    /// The calibration for a pool of this shape and a vocabulary of `vocab_size`; `None` when
    /// the pool is too small to hold every slot.
    pub fn new(cfg: &SchedulerConfig, vocab_size: usize) -> Option<Self> {
        let bs = cfg.block_size;
        if cfg.num_blocks < SLOT_TOKENS.div_ceil(bs) * SLOTS {
            return None;
        }
        let per_slot = (SLOT_TOKENS / bs) as BlockId;
        let block_tables = (0..SLOTS as BlockId)
            .map(|s| (0..per_slot).map(|b| s * per_slot + b).collect())
            .collect();
        let vocab = (vocab_size as u32).max(1);
        let tokens = (0..SLOT_TOKENS as u32)
            .map(|i| (1000 + i * 7919) % vocab)
            .collect();
        let steps = STEPS
            .iter()
            .map(|&(prompt, decodes)| {
                let mut chunks: Vec<CalibrationChunk> = (0..decodes)
                    .map(|d| CalibrationChunk {
                        slot: d,
                        tokens: d..d + 1,
                        start: DECODE_CONTEXT,
                        is_decode: true,
                    })
                    .collect();
                if prompt > 0 {
                    chunks.push(CalibrationChunk {
                        slot: SLOTS - 1,
                        tokens: 0..prompt,
                        start: 0,
                        is_decode: false,
                    });
                }
                chunks
            })
            .collect();
        Some(Self {
            steps,
            block_tables,
            tokens,
        })
    }

    /// What the cost model sees of one step.
    pub fn features(step: &[CalibrationChunk]) -> StepFeatures {
        let mut f = StepFeatures::default();
        for c in step {
            f.add_chunk(c.start, c.tokens.len(), c.is_decode);
        }
        f
    }

    /// The cost model fitted to the measured seconds of every step, in order, from the
    /// default prior.
    pub fn fit(&self, secs: &[f64]) -> CostModel {
        debug_assert_eq!(secs.len(), self.steps.len());
        let mut cost = CostModel::default();
        for (step, &s) in self.steps.iter().zip(secs) {
            cost.observe(Self::features(step), s);
        }
        cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_fit_their_slots() {
        let cfg = SchedulerConfig {
            block_size: 32,
            num_blocks: 64,
            ..SchedulerConfig::default()
        };
        let c = Calibration::new(&cfg, 49152).unwrap();
        assert_eq!(c.steps.len(), STEPS.len());
        for step in &c.steps {
            for chunk in step {
                let end = chunk.start + chunk.tokens.len();
                assert!(end <= c.block_tables[chunk.slot].len() * cfg.block_size);
                assert!(chunk.tokens.end <= c.tokens.len());
            }
        }
        let used: std::collections::HashSet<_> = c.block_tables.iter().flatten().collect();
        assert_eq!(used.len(), 64, "slots never share a block");
        assert_eq!(
            Calibration::features(&c.steps[6]),
            StepFeatures {
                prefill_tokens: 128,
                decode_seqs: 4,
                attended_tokens: 4 * 65 + 128 * 129 / 2,
                embed_tokens: 0,
            }
        );
    }

    #[test]
    fn a_small_pool_is_not_calibrated() {
        let cfg = SchedulerConfig {
            block_size: 16,
            num_blocks: 127,
            ..SchedulerConfig::default()
        };
        assert!(Calibration::new(&cfg, 100).is_none());
    }

    #[test]
    fn the_fit_learns_from_every_step() {
        let cfg = SchedulerConfig::default();
        let c = Calibration::new(&cfg, 100).unwrap();
        let secs: Vec<f64> = c
            .steps
            .iter()
            .map(|s| {
                let f = Calibration::features(s);
                0.002 + 1e-4 * f.prefill_tokens as f64 + 5e-4 * f.decode_seqs as f64
            })
            .collect();
        let cost = c.fit(&secs);
        assert_eq!(cost.num_observations(), 7);
        let f = Calibration::features(&c.steps[5]);
        assert!((cost.predict(f) - secs[5]).abs() < 0.2 * secs[5]);
    }
}
