//! The submitting side of the engine: admission, and the counters it reads.
//!
//! Admission is decided here, not on the engine thread, so a full server answers 429 at once
//! instead of after the current step. Every field was validated before submission; the one
//! bound only the engine knows, its KV pool, is checked here, and nowhere else. Draining is
//! the server's flag, checked at its door (`AppState::ready`), so a request that came in
//! before draining began is still served. The waiting queue is a semaphore of `max_waiting`
//! permits: a submission takes one (`try_acquire_owned`, none left: `QueueFull`) and the
//! request carries it until the engine first schedules it, or drops it unscheduled (finished,
//! failed, cancelled, refused). Dropping is the only release, so no path can forget one;
//! "waiting" is exactly the permits out: submitted and not yet scheduled once.
//!
//! The same channel carries the server's own endings (`finish`): a request the server ends
//! (a stop string, its deadline) is still the engine's to report, exactly once, so the server
//! says so instead of just letting go of the request's event channel, which the engine takes
//! for a client that left.

use crate::request::{EmbedRequest, EmbeddingModel, EngineRequest, SubmitError};
use crate::step_watch::StepWatch;
use braid_sched::{FinishReason, SchedulerConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A request on its way to the engine, holding its place in the waiting queue.
pub struct Submitted {
    pub request: EngineRequest,
    pub waiting: OwnedSemaphorePermit,
}

/// An embedding request on its way to the engine, holding its place in the waiting queue.
pub struct EmbedSubmitted {
    pub request: EmbedRequest,
    pub waiting: OwnedSemaphorePermit,
}

/// What the engine thread reads from its channel.
pub enum EngineMessage {
    /// Boxed: a request is large, a finish small.
    Submit(Box<Submitted>),
    Embed(Box<EmbedSubmitted>),
    /// The server ended request `id` after passing `completion_tokens` of its tokens on.
    Finish {
        id: u64,
        reason: FinishReason,
        completion_tokens: usize,
    },
    /// Drop the prefix cache's unheld blocks and answer how many went.
    FlushPrefixCache(tokio::sync::oneshot::Sender<usize>),
}

/// What the engine thread publishes after every step, the waiting queue, and the server's
/// own flags.
pub(crate) struct EngineShared {
    /// One permit per place in the waiting queue.
    waiting: Arc<Semaphore>,
    max_waiting: usize,
    pub running: AtomicUsize,
    /// KV usage × 1e6 (atomics have no f64).
    pub kv_usage_ppm: AtomicU64,
    pub draining: AtomicBool,
    pub alive: AtomicBool,
    /// Set once the engine has timed its calibration steps and fitted the cost model: until
    /// then it runs no request.
    pub calibrated: AtomicBool,
    pub next_id: AtomicU64,
    pub step: StepWatch,
}

impl EngineShared {
    /// Requests submitted and not yet scheduled once.
    pub fn num_waiting(&self) -> usize {
        self.max_waiting - self.waiting.available_permits()
    }
}

#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<EngineMessage>,
    shared: Arc<EngineShared>,
    sched: Arc<SchedulerConfig>,
}

#[derive(Clone, Copy, Debug)]
pub struct EngineStats {
    pub waiting: usize,
    pub running: usize,
    pub kv_usage: f64,
}

impl EngineHandle {
    /// A handle for an engine reading `tx`, admitting up to `max_waiting` unscheduled
    /// requests and refusing any that `sched` could never run. Marks the engine alive.
    pub fn new(
        tx: mpsc::Sender<EngineMessage>,
        sched: SchedulerConfig,
        max_waiting: usize,
    ) -> Self {
        let shared = Arc::new(EngineShared {
            waiting: Arc::new(Semaphore::new(max_waiting)),
            max_waiting,
            running: AtomicUsize::new(0),
            kv_usage_ppm: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            calibrated: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            step: StepWatch::new(),
        });
        Self {
            tx,
            shared,
            sched: Arc::new(sched),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<EngineShared> {
        &self.shared
    }

    pub fn next_request_id(&self) -> u64 {
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues `req`: `EngineStopped` when the engine is gone, `ExceedsKvPool` when it could
    /// never run, `QueueFull` when `max_waiting` are waiting.
    pub fn submit(&self, req: EngineRequest) -> Result<(), SubmitError> {
        self.check_alive()?;
        self.check_fits_kv_pool(req.prompt.len(), req.max_new_tokens())?;
        let waiting = self.waiting_place()?;
        self.tx
            .send(EngineMessage::Submit(Box::new(Submitted {
                request: req,
                waiting,
            })))
            .map_err(|_| SubmitError::EngineStopped)
    }

    fn check_alive(&self) -> Result<(), SubmitError> {
        if self.shared.alive.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(SubmitError::EngineStopped)
        }
    }

    /// `ExceedsKvPool` for a prompt the whole KV pool could never hold with its tokens to come.
    fn check_fits_kv_pool(
        &self,
        prompt_len: usize,
        max_new_tokens: usize,
    ) -> Result<(), SubmitError> {
        match self.sched.exceeds_kv_pool(prompt_len, max_new_tokens) {
            Some(needed_tokens) => Err(SubmitError::ExceedsKvPool {
                needed_tokens,
                pool_tokens: self.sched.pool_tokens(),
            }),
            None => Ok(()),
        }
    }

    /// A place in the waiting queue, or `QueueFull`.
    fn waiting_place(&self) -> Result<OwnedSemaphorePermit, SubmitError> {
        self.shared
            .waiting
            .clone()
            .try_acquire_owned()
            .map_err(|_| SubmitError::QueueFull {
                waiting: self.shared.num_waiting(),
            })
    }

    /// Queues texts for the embedding model: `EngineStopped` when the engine is gone,
    /// `QueueFull` when `max_waiting` requests of either kind are waiting.
    pub fn embed(&self, req: EmbedRequest) -> Result<(), SubmitError> {
        self.check_alive()?;
        // The generation model reads each text as a prompt: it must fit the KV pool.
        if req.model == EmbeddingModel::Generation {
            for t in &req.texts {
                self.check_fits_kv_pool(t.len(), 1)?;
            }
        }
        let waiting = self.waiting_place()?;
        self.tx
            .send(EngineMessage::Embed(Box::new(EmbedSubmitted {
                request: req,
                waiting,
            })))
            .map_err(|_| SubmitError::EngineStopped)
    }

    /// The server ended request `id` itself (a stop string matched, its deadline passed) after
    /// passing `completion_tokens` tokens on to the client. The engine frees its sequence,
    /// reports it finished with `reason` and those tokens (not the ones it sent past them),
    /// and answers with `EngineEvent::Done` on the request's channel; a request the engine
    /// already ended is reported once, as the engine ended it. Call it before dropping the
    /// request's event receiver, or the engine takes the request for a departed client.
    pub fn finish(&self, id: u64, reason: FinishReason, completion_tokens: usize) {
        // An engine that is gone has nothing left to report.
        let _ = self.tx.send(EngineMessage::Finish {
            id,
            reason,
            completion_tokens,
        });
    }

    /// Drops the prefix cache's blocks no sequence holds, between steps; how many went, or
    /// None when the engine is gone.
    pub async fn flush_prefix_cache(&self) -> Option<usize> {
        let (answer, dropped) = tokio::sync::oneshot::channel();
        self.tx.send(EngineMessage::FlushPrefixCache(answer)).ok()?;
        dropped.await.ok()
    }

    /// Tokens per KV block (the prefix cache's unit).
    pub fn block_size(&self) -> usize {
        self.sched.block_size
    }

    /// Tokens the KV pool holds.
    pub fn pool_tokens(&self) -> usize {
        self.sched.pool_tokens()
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            waiting: self.shared.num_waiting(),
            running: self.shared.running.load(Ordering::Acquire),
            kv_usage: self.shared.kv_usage_ppm.load(Ordering::Acquire) as f64 / 1e6,
        }
    }

    /// Marks the server draining (`is_draining`): it takes no new requests.
    pub fn start_draining(&self) {
        self.shared.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.shared.draining.load(Ordering::Acquire)
    }

    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::Acquire)
    }

    /// Returns once the engine has calibrated its cost model (a second or two after it starts),
    /// or has stopped. A request sent before then waits in the queue for the calibration, so a
    /// server is ready only after it.
    pub async fn until_calibrated(&self) {
        while !self.shared.calibrated.load(Ordering::Acquire) && self.is_alive() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// How long the engine's current step has run; `None` between steps.
    pub fn step_running_for(&self) -> Option<Duration> {
        self.shared.step.running_for()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_model::SamplingParams;
    use std::time::Instant;

    fn request(h: &EngineHandle) -> EngineRequest {
        EngineRequest {
            id: h.next_request_id(),
            prompt: vec![1, 2, 3],
            max_tokens: 4,
            score_prompt: None,
            shares_prompt_with: None,
            first_of_request: None,
            params: SamplingParams::greedy(),
            constraint: None,
            prediction: None,
            stop_token_ids: vec![],
            arrival: Instant::now(),
            events: tokio::sync::mpsc::unbounded_channel().0,
            span: tracing::Span::none(),
        }
    }

    #[test]
    fn a_place_in_the_queue_is_held_until_the_request_lets_go_of_it() {
        let (tx, rx) = mpsc::channel();
        let h = EngineHandle::new(tx, SchedulerConfig::default(), 2);
        h.submit(request(&h)).unwrap();
        h.submit(request(&h)).unwrap();
        assert_eq!(h.stats().waiting, 2);
        assert_eq!(
            h.submit(request(&h)),
            Err(SubmitError::QueueFull { waiting: 2 })
        );
        let Ok(EngineMessage::Submit(first)) = rx.recv() else {
            panic!("a submission")
        };
        drop(first.waiting); // scheduled
        assert_eq!(h.stats().waiting, 1);
        h.submit(request(&h)).unwrap();
        assert_eq!(h.stats().waiting, 2);
        drop(rx); // the engine is gone: its queued requests go with it
        assert_eq!(h.stats().waiting, 0);
        assert_eq!(h.submit(request(&h)), Err(SubmitError::EngineStopped));
        assert_eq!(
            h.stats().waiting,
            0,
            "a failed submission gives its place back"
        );
    }

    #[test]
    fn a_request_the_pool_can_never_hold_is_refused_before_the_queue() {
        let (tx, _rx) = mpsc::channel();
        let sched = SchedulerConfig {
            num_blocks: 4, // 64 positions
            ..SchedulerConfig::default()
        };
        let h = EngineHandle::new(tx, sched, 0);
        let mut req = request(&h);
        req.max_tokens = 63; // 3 + 63 - 1 = 65 positions
        assert_eq!(
            h.submit(req),
            Err(SubmitError::ExceedsKvPool {
                needed_tokens: 65,
                pool_tokens: 64
            })
        );
        assert_eq!(
            h.submit(request(&h)),
            Err(SubmitError::QueueFull { waiting: 0 })
        );
    }
}
