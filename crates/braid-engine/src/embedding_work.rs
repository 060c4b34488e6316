//! The engine's embedding side: the texts it holds for each embedding request, the embedding
//! model's forward over the batches a step plans, and each request's answer once its last
//! text is done.
//!
//! Texts are the scheduler's to order (`braid_sched::embedding_queue`); here they are only
//! kept, run and answered. A request whose client left (its answer's receiver dropped) loses
//! its waiting texts before the next step; a failed forward fails every embedding request in
//! flight, as a failed generation step fails every sequence.

use crate::handle::EmbedSubmitted;
use crate::observer::{EmbeddingDone, EngineObserver};
use crate::request::Embedded;
use braid_embedding::SentenceEmbedder;
use braid_sched::{EmbedText, EmbeddingBatch, Scheduler};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use tokio::sync::OwnedSemaphorePermit;

struct Pending {
    texts: Vec<Vec<u32>>,
    vectors: Vec<Option<Vec<f32>>>,
    left: usize,
    answer: oneshot::Sender<Result<Embedded, String>>,
    arrival: Instant,
    /// Its place in the waiting queue, until its first text runs.
    waiting: Option<OwnedSemaphorePermit>,
    queue: Option<Duration>,
    span: tracing::Span,
}

pub(crate) struct EmbeddingWork {
    pub(crate) embedder: Arc<SentenceEmbedder>,
    pending: HashMap<u64, Pending>,
}

impl EmbeddingWork {
    pub(crate) fn new(embedder: Arc<SentenceEmbedder>) -> Self {
        Self {
            embedder,
            pending: HashMap::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Keeps the request and queues its texts in the scheduler.
    pub(crate) fn admit(&mut self, sub: EmbedSubmitted, sched: &mut Scheduler, arrival_secs: f64) {
        let req = sub.request;
        for (index, t) in req.texts.iter().enumerate() {
            sched.add_embedding(EmbedText {
                request: req.id,
                index,
                tokens: t.len(),
                arrival: arrival_secs,
            });
        }
        let n = req.texts.len();
        self.pending.insert(
            req.id,
            Pending {
                vectors: vec![None; n],
                left: n,
                texts: req.texts,
                answer: req.answer,
                arrival: req.arrival,
                waiting: Some(sub.waiting),
                queue: None,
                span: req.span,
            },
        );
    }

    /// Forgets the requests whose clients left, and their waiting texts.
    pub(crate) fn drop_departed(&mut self, sched: &mut Scheduler) {
        self.pending.retain(|&id, p| {
            if !p.answer.is_closed() {
                return true;
            }
            let dropped = sched.abort_embedding(id);
            tracing::info!(parent: &p.span, id, texts_dropped = dropped, "client left before its embeddings were done");
            false
        });
    }

    /// Runs the step's batches and answers every request whose last text was among them.
    /// The batches' requests are all pending: the scheduler holds only their texts.
    pub(crate) fn run(
        &mut self,
        batches: &[EmbeddingBatch],
        started: Instant,
        observer: &dyn EngineObserver,
    ) -> Result<(), String> {
        for batch in batches {
            for t in &batch.texts {
                if let Some(p) = self.pending.get_mut(&t.request) {
                    if p.waiting.take().is_some() {
                        p.queue = Some(started.saturating_duration_since(p.arrival));
                    }
                }
            }
            let inputs: Vec<&[u32]> = batch
                .texts
                .iter()
                .map(|t| self.pending[&t.request].texts[t.index].as_slice())
                .collect();
            let vectors = self.embedder.embed(&inputs).map_err(|e| e.to_string())?;
            for (t, v) in batch.texts.iter().zip(vectors) {
                let p = self
                    .pending
                    .get_mut(&t.request)
                    .expect("a planned text's request is pending");
                p.vectors[t.index] = Some(v);
                p.left -= 1;
            }
        }
        let done: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.left == 0)
            .map(|(&id, _)| id)
            .collect();
        for id in done {
            let p = self.pending.remove(&id).expect("listed above");
            let queue = p.queue.unwrap_or_default();
            let prompt_tokens = p.texts.iter().map(Vec::len).sum();
            observer.embedded(&EmbeddingDone {
                texts: p.texts.len(),
                prompt_tokens,
                queue,
                e2e: p.arrival.elapsed(),
            });
            let vectors = p
                .vectors
                .into_iter()
                .map(|v| v.expect("every text ran"))
                .collect();
            let _ = p.answer.send(Ok(Embedded {
                vectors,
                queue_secs: queue.as_secs_f64(),
            }));
        }
        Ok(())
    }

    /// Fails every request in flight (the scheduler is started afresh by the caller).
    pub(crate) fn fail_all(&mut self, message: &str) {
        for (_, p) in self.pending.drain() {
            let _ = p.answer.send(Err(message.to_string()));
        }
    }
}
