//! What the HTTP side and the engine thread say to each other.
//!
//! A handler submits a validated `EngineRequest` and keeps the receiving end of its event
//! channel; the engine thread sends every sampled token and the ending there. Cancelling is
//! dropping the receiver: the engine sees the closed channel before its next step and frees the
//! sequence. Admission (the bounded waiting queue) is decided here, against counters the engine
//! keeps current, so a full server answers 429 at once instead of after the current step.

use braid_model::{Sampled, SamplingParams};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

pub struct EngineRequest {
    pub id: u64,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub params: SamplingParams,
    /// Generation ends when one of these is sampled (empty with `ignore_eos`). The stop token
    /// itself is not part of the output.
    pub stop_token_ids: Vec<u32>,
    pub arrival: Instant,
    pub events: UnboundedSender<EngineEvent>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token (or, decided by the handler, a stop string).
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Finished {
    pub reason: FinishReason,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Arrival to first scheduled, when it was scheduled at all.
    pub queue_secs: Option<f64>,
}

#[derive(Debug)]
pub enum EngineEvent {
    /// A generated token (never a stop token).
    Token(Sampled),
    /// The last event of a successful request.
    Done(Finished),
    /// The engine failed while this request ran (model error or engine panic): a 500.
    Failed(String),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SubmitError {
    #[error("the server is at capacity: {waiting} requests are already waiting; retry later")]
    QueueFull { waiting: usize },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the inference engine has stopped")]
    EngineStopped,
}

/// Counters the engine thread publishes after every step, read by handlers and /metrics.
#[derive(Default)]
pub struct EngineShared {
    /// Submitted and not yet finished or admitted (channel + scheduler queue).
    pub waiting: AtomicUsize,
    pub running: AtomicUsize,
    /// KV usage × 1e6 (atomics have no f64).
    pub kv_usage_ppm: AtomicU64,
    pub draining: AtomicBool,
    pub alive: AtomicBool,
    pub next_id: AtomicU64,
}

/// One engine step as the live view draws it (`GET /debug/steps`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepRecord {
    /// Seconds since the engine started.
    pub t: f64,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    pub duration_ms: f64,
    pub predicted_ms: Option<f64>,
    pub target_ms: Option<f64>,
    pub running: usize,
    pub waiting: usize,
    pub kv_usage: f64,
    pub preempted: usize,
    /// Gaps (ms) between this step's tokens and the previous token of the same stream.
    pub itl_ms: Vec<f64>,
}

#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<EngineRequest>,
    shared: Arc<EngineShared>,
    max_waiting: usize,
    steps: tokio::sync::broadcast::Sender<StepRecord>,
}

#[derive(Clone, Copy, Debug)]
pub struct EngineStats {
    pub waiting: usize,
    pub running: usize,
    pub kv_usage: f64,
}

impl EngineHandle {
    pub fn new(
        tx: mpsc::Sender<EngineRequest>,
        shared: Arc<EngineShared>,
        max_waiting: usize,
        steps: tokio::sync::broadcast::Sender<StepRecord>,
    ) -> Self {
        Self {
            tx,
            shared,
            max_waiting,
            steps,
        }
    }

    /// A live feed of every engine step; a slow reader skips steps rather than slowing the engine.
    pub fn subscribe_steps(&self) -> tokio::sync::broadcast::Receiver<StepRecord> {
        self.steps.subscribe()
    }

    pub fn next_request_id(&self) -> u64 {
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn submit(&self, req: EngineRequest) -> Result<(), SubmitError> {
        if self.shared.draining.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown);
        }
        if !self.shared.alive.load(Ordering::Acquire) {
            return Err(SubmitError::EngineStopped);
        }
        let reserved = self
            .shared
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w < self.max_waiting).then_some(w + 1)
            });
        if let Err(waiting) = reserved {
            return Err(SubmitError::QueueFull { waiting });
        }
        self.tx.send(req).map_err(|_| {
            self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
            SubmitError::EngineStopped
        })
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            waiting: self.shared.waiting.load(Ordering::Acquire),
            running: self.shared.running.load(Ordering::Acquire),
            kv_usage: self.shared.kv_usage_ppm.load(Ordering::Acquire) as f64 / 1e6,
        }
    }

    /// Stop admitting: new submissions get `ShuttingDown` (503).
    pub fn start_draining(&self) {
        self.shared.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.shared.draining.load(Ordering::Acquire)
    }

    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::Acquire)
    }

    pub fn max_waiting(&self) -> usize {
        self.max_waiting
    }
}
