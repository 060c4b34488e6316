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
//!     for r in new_requests { sched.add(id, prompt, max_tokens, now)? }   // refuse → HTTP error
//!     for id in cancelled   { sched.abort(id); }
//!     let plan = sched.plan(now);
//!     if plan.is_empty() { wait for work; continue }
//!     let t0 = Instant::now();
//!     let logits = model.forward(&plan, |id| sched.sequence(id));        // one batch
//!     let sampled = sample(&plan, logits);                               // (seq, token) per chunk.sample
//!     sched.commit(&plan, &sampled);
//!     sched.observe_step(StepFeatures::of(&plan), t0.elapsed().as_secs_f64());
//!     for (id, tok) in sampled { send; if stop or num_generated == max_new_tokens { sched.finish(id); } }
//! }
//! ```

pub mod block_allocator;
pub mod config;
pub mod cost_model;
pub mod planner;
pub mod prefix_cache;
pub mod sequence;
pub mod step_plan;

pub use block_allocator::{BlockAllocator, BlockId};
pub use config::{AddError, SchedulerConfig};
pub use cost_model::{CostModel, StepFeatures};
pub use planner::Scheduler;
pub use prefix_cache::{BlockHash, BlockHasher, PrefixCacheStats};
pub use sequence::{SeqId, SeqState, Sequence};
pub use step_plan::{ScheduledChunk, StepPlan};
