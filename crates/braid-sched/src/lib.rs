//! braid-sched: which tokens the next engine step computes.
//!
//! This crate is the part of braid that decides, and nothing else: no model, no async
//! runtime, no clock of its own (callers pass time in). That makes every rule of the
//! planner testable and simulable in milliseconds: scripted arrivals go in, `StepPlan`s
//! come out, and a fake engine can run thousands of steps against a synthetic cost.
//!
//! The engine loop it is written for:
//!
//! ```text
//! loop {
//!     for r in new_requests { sched.add(id, prompt, stop_conditions, now) }  // refused before, if ever
//!     for id in ended_outside { sched.abort(id); }                          // client left, stop string, deadline
//!     for t in texts_to_embed { sched.add_embedding(t) }                    // no sequence, no KV
//!     for (id, guess) in drafts { sched.set_draft(id, guess) }            // speculative decoding
//!     let plan = sched.plan(now);
//!     if plan.is_empty() { wait for work; continue }
//!     let t0 = Instant::now();
//!     let logits = model.forward(&plan, |id| sched.sequence(id));        // one batch
//!     let sampled = sample(&plan, logits);                               // (seq, token) per chunk.sample,
//!                                                                        // more while drafts agree
//!     let vectors = embedder.embed(&plan.embeddings);                    // one forward, rows stacked
//!     let finished = sched.commit(&plan, &sampled);                      // stop token, max_tokens, context end
//!     sched.observe_step(StepFeatures::of(&plan), t0.elapsed().as_secs_f64());
//!     for (id, tok) in sampled { send tok unless it is a stop token }
//!     for f in finished { tell f.seq.id it ended, and why (f.reason) }
//! }
//! ```
//!
//! The scheduler alone decides when a sequence ends (`sequence.rs`), and each step's plan
//! carries its own counts (preemptions, prefix-cache lookups), so the engine reports values
//! rather than differencing totals. `calibration.rs` describes the steps the engine times at
//! start-up to fit the cost model before the first request.

pub mod block_allocator;
pub mod cache_events;
pub mod calibration;
pub mod config;
pub mod cost_model;
pub mod draft_acceptance;
pub mod embedding_queue;
pub mod ngram_index;
pub mod planner;
pub mod prefix_cache;
pub mod prompt_shares;
pub mod sequence;
pub mod step_headroom;
pub mod step_plan;

pub use block_allocator::{BlockAllocator, BlockId};
pub use cache_events::{CacheEvent, CacheEvents};
pub use calibration::{Calibration, CalibrationChunk};
pub use config::SchedulerConfig;
pub use cost_model::{CostModel, StepFeatures};
pub use draft_acceptance::{DraftAcceptance, DraftSource};
pub use embedding_queue::{EmbedRequestId, EmbedText, EmbeddingBatch};
pub use ngram_index::NgramIndex;
pub use planner::Scheduler;
pub use prefix_cache::{BlockHash, BlockHasher, PrefixCacheStats};
pub use sequence::{FinishReason, FinishedSeq, SeqId, SeqState, Sequence, StopConditions};
pub use step_plan::{ScheduledChunk, StepPlan};
