//! braid-engine: the thread that runs the model, one planned step after another.
//!
//! A request's path through braid, and where each piece lives:
//!
//! ```text
//!  braid-server handler ── validate, tokenize ──▶ EngineHandle::submit ── 429 / 400 / 503 at once
//!        ▲                                              │ std mpsc (+ a waiting-queue permit)
//!        │                                              ▼
//!        │                         engine thread ─ admit: Scheduler::add (braid-sched)
//!        │                                              │
//!        │                                  plan ◀──────┘   Scheduler::plan → StepPlan
//!        │                                   │
//!        │                                forward          one batch over every chunk (braid-model)
//!        │                                   │
//!        │                                sample           per sampled row (braid-model)
//!        │                                   │
//!        │                                commit           Scheduler::commit: who finished, and why
//!        │                                   │
//!        │                     EngineObserver::step / ::request   (StepStats, RequestEvent values)
//!        │                                   │
//!        └──── EngineEvent::{Token, Done, Failed} on the request's own channel
//!
//!  braid-server ── stop string, deadline ──▶ EngineHandle::finish ──▶ reported like any end
//!
//!  braid-server /v1/embeddings ── tokenize ──▶ EngineHandle::embed ──▶ Scheduler::add_embedding
//!        texts join steps like prompt slices (StepPlan::embeddings), one embedding forward
//!        per batch after the generation forward; the answer goes back on a oneshot
//! ```
//!
//! The engine is a plain OS thread, not a tokio task: a step is tens of milliseconds of
//! CPU work that fans out to the rayon compute pool, and run on an async worker it would
//! stall every connection's I/O behind it. It blocks on its request channel when idle and
//! never awaits anything.
//!
//! Nothing here speaks HTTP or Prometheus. The engine reports each step as a [`StepStats`]
//! value and each request's milestones as [`RequestEvent`]s to an [`EngineObserver`] the
//! server supplies, which turns them into metrics and the live dashboard.

mod calibration_run;
pub mod compute_pool;
mod config;
mod draft_model;
mod drafter;
mod embedding_work;
mod engine;
mod handle;
mod observer;
mod request;
mod step_watch;

pub use braid_embedding::{Pooling, SentenceEmbedder};
pub use braid_sched::{CacheEvent, FinishReason};
pub use config::EngineConfig;
pub use draft_model::vocabulary_mismatch;
pub use drafter::Speculation;
pub use engine::spawn_engine;
pub use handle::{EmbedSubmitted, EngineHandle, EngineMessage, EngineStats, Submitted};
pub use observer::{
    EmbeddingDone, EngineInfo, EngineObserver, RequestEvent, StepStats, TokenTiming,
};
pub use request::{
    EmbedRequest, Embedded, EmbeddingModel, EngineEvent, EngineRequest, Finished, PredictionUsage,
    SubmitError,
};
