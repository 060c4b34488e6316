//! The engine's embedding side: the texts it holds for each embedding request, the sentence
//! model's forward over the batches a step plans, the pooling of the generation model's hidden
//! states for texts it reads (`--pooling`), and each request's answer once its last text is
//! done.
//!
//! Texts are the scheduler's to order: the sentence model's in its embedding queue
//! (`braid_sched::embedding_queue`), the generation model's as prompts that generate nothing
//! (each read in slices like any prompt, scored so no cached prefix skips a row, and ended by
//! the engine once its last slice is read). Here they are only kept, run and answered. A
//! request whose client left (its answer's receiver dropped) loses its waiting texts before
//! the next step; a failed step fails every embedding request in flight, as it fails every
//! sequence.

use crate::handle::EmbedSubmitted;
use crate::observer::{EmbeddingDone, EngineObserver};
use crate::request::Embedded;
use braid_embedding::pooling::normalize;
use braid_embedding::{Pooling, SentenceEmbedder};
use braid_sched::{EmbedText, EmbeddingBatch, Scheduler, SeqId};
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

/// The hidden rows one step computed for a text the generation model reads for an embedding.
pub(crate) struct PooledSlice {
    pub seq: SeqId,
    /// The hidden size's floats a row, in position order.
    pub rows: Vec<f32>,
    /// The slice starts at the text's first token: the first time, or again after the
    /// sequence was preempted and its text is read anew.
    pub from_start: bool,
    /// The text is read whole with this slice.
    pub whole: bool,
}

/// A text the generation model reads for an embedding: where its vector goes, and the pooling
/// so far over the slices read.
struct PooledText {
    request: u64,
    index: usize,
    /// Mean: the sum of the rows read; cls: the first row; last: the latest row.
    acc: Vec<f64>,
    rows: usize,
}

pub(crate) struct EmbeddingWork {
    /// The sentence model (`--embedding-model`), when one is served.
    pub(crate) embedder: Option<Arc<SentenceEmbedder>>,
    /// How the generation model's hidden states make a vector (`--pooling`), when it embeds.
    pub(crate) pooling: Option<Pooling>,
    /// The generation model's hidden size: the length of its rows and vectors.
    hidden_size: usize,
    pending: HashMap<u64, Pending>,
    /// The generation model's texts being read, by their sequence.
    pooled: HashMap<SeqId, PooledText>,
}

impl EmbeddingWork {
    pub(crate) fn new(
        embedder: Option<Arc<SentenceEmbedder>>,
        pooling: Option<Pooling>,
        hidden_size: usize,
    ) -> Self {
        Self {
            embedder,
            pooling,
            hidden_size,
            pending: HashMap::new(),
            pooled: HashMap::new(),
        }
    }

    /// Whether `seq` is a text the generation model reads for an embedding.
    pub(crate) fn is_pooled(&self, seq: SeqId) -> bool {
        self.pooled.contains_key(&seq)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Keeps the request and queues its texts for the sentence model.
    pub(crate) fn admit(&mut self, sub: EmbedSubmitted, sched: &mut Scheduler, arrival_secs: f64) {
        for (index, t) in sub.request.texts.iter().enumerate() {
            sched.add_embedding(EmbedText {
                request: sub.request.id,
                index,
                tokens: t.len(),
                arrival: arrival_secs,
            });
        }
        self.keep(sub);
    }

    /// Keeps the request and queues each text as a prompt of the generation model, under the
    /// sequence id `next_id` gives it.
    pub(crate) fn admit_pooled(
        &mut self,
        sub: EmbedSubmitted,
        sched: &mut Scheduler,
        arrival_secs: f64,
        mut next_id: impl FnMut() -> SeqId,
    ) {
        let mut first = None;
        for (index, t) in sub.request.texts.iter().enumerate() {
            let seq = next_id();
            sched.add(seq, t.clone(), 1, arrival_secs);
            // Every row is wanted, so none may come from the prefix cache.
            sched.score_prompt(seq);
            // The texts of a request share prompt reading as one request's prompts do.
            sched.same_request(seq, *first.get_or_insert(seq));
            self.pooled.insert(
                seq,
                PooledText {
                    request: sub.request.id,
                    index,
                    acc: Vec::new(),
                    rows: 0,
                },
            );
        }
        self.keep(sub);
    }

    fn keep(&mut self, sub: EmbedSubmitted) {
        let req = sub.request;
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
        let pooled = &mut self.pooled;
        self.pending.retain(|&id, p| {
            if !p.answer.is_closed() {
                return true;
            }
            let mut dropped = sched.abort_embedding(id);
            pooled.retain(|&seq, t| {
                let mine = t.request == id;
                dropped += usize::from(mine && sched.abort(seq));
                !mine
            });
            tracing::info!(parent: &p.span, id, texts_dropped = dropped, "client left before its embeddings were done");
            false
        });
    }

    /// Marks request `id` as scheduled at `started`, the first time one of its texts runs.
    fn started(&mut self, id: u64, started: Instant) {
        if let Some(p) = self.pending.get_mut(&id) {
            if p.waiting.take().is_some() {
                p.queue = Some(started.saturating_duration_since(p.arrival));
            }
        }
    }

    /// Pools the hidden rows a step computed for a text and, when the text is read whole,
    /// stores its vector, ends its sequence and answers its request if that was its last text.
    pub(crate) fn pool(
        &mut self,
        slice: PooledSlice,
        started: Instant,
        sched: &mut Scheduler,
        observer: &dyn EngineObserver,
    ) {
        let Some(pooling) = self.pooling else { return };
        let dim = self.hidden_size;
        let PooledSlice {
            seq,
            rows,
            from_start,
            whole,
        } = slice;
        let Some(t) = self.pooled.get_mut(&seq) else {
            return;
        };
        let request = t.request;
        // A preempted text is read again from its first token: what it pooled before is
        // dropped, or the mean would count those rows twice.
        if from_start {
            t.acc = vec![0.0; dim];
            t.rows = 0;
        }
        let n = rows.len() / dim;
        match pooling {
            Pooling::Mean => {
                for row in rows.chunks_exact(dim) {
                    t.acc
                        .iter_mut()
                        .zip(row)
                        .for_each(|(a, &x)| *a += f64::from(x));
                }
            }
            Pooling::Cls if t.rows == 0 && n > 0 => {
                t.acc
                    .iter_mut()
                    .zip(&rows[..dim])
                    .for_each(|(a, &x)| *a = f64::from(x));
            }
            Pooling::Cls => {}
            Pooling::Last if n > 0 => {
                let row = &rows[(n - 1) * dim..];
                t.acc
                    .iter_mut()
                    .zip(row)
                    .for_each(|(a, &x)| *a = f64::from(x));
            }
            Pooling::Last => {}
        }
        t.rows += n;
        self.started(request, started);
        if !whole {
            return;
        }
        let t = self.pooled.remove(&seq).expect("found above");
        sched.abort(seq);
        let scale = if pooling == Pooling::Mean {
            t.rows.max(1) as f64
        } else {
            1.0
        };
        let mut v: Vec<f32> = t.acc.iter().map(|&a| (a / scale) as f32).collect();
        normalize(&mut v);
        self.deliver(request, t.index, v, observer);
    }

    /// Stores text `index`'s vector, and answers its request if that was its last text.
    fn deliver(
        &mut self,
        request: u64,
        index: usize,
        vector: Vec<f32>,
        observer: &dyn EngineObserver,
    ) {
        let Some(p) = self.pending.get_mut(&request) else {
            return;
        };
        p.vectors[index] = Some(vector);
        p.left -= 1;
        if p.left > 0 {
            return;
        }
        let p = self.pending.remove(&request).expect("found above");
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

    /// Runs the step's sentence-model texts and answers every request whose last text was
    /// among them. The batch's requests are all pending: the scheduler holds only their texts.
    pub(crate) fn run(
        &mut self,
        batch: Option<&EmbeddingBatch>,
        started: Instant,
        observer: &dyn EngineObserver,
    ) -> Result<(), String> {
        let Some(batch) = batch else {
            return Ok(());
        };
        let embedder = self
            .embedder
            .clone()
            .ok_or("texts planned for a sentence model this engine does not have")?;
        let inputs: Vec<&[u32]> = batch
            .texts
            .iter()
            .map(|t| self.pending[&t.request].texts[t.index].as_slice())
            .collect();
        let vectors = embedder.embed(&inputs).map_err(|e| e.to_string())?;
        for (t, v) in batch.texts.iter().zip(vectors) {
            self.started(t.request, started);
            self.deliver(t.request, t.index, v, observer);
        }
        Ok(())
    }

    /// Fails every request in flight (the scheduler is started afresh by the caller).
    pub(crate) fn fail_all(&mut self, message: &str) {
        self.pooled.clear();
        for (_, p) in self.pending.drain() {
            let _ = p.answer.send(Err(message.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observer::{EngineInfo, RequestEvent, StepStats};
    use crate::request::{EmbedRequest, EmbeddingModel};
    use braid_sched::SchedulerConfig;
    use tokio::sync::Semaphore;

    struct Quiet;

    impl EngineObserver for Quiet {
        fn started(&self, _: &EngineInfo) {}
        fn step(&self, _: &StepStats) {}
        fn request(&self, _: u64, _: &RequestEvent) {}
    }

    /// One text of four tokens, mean-pooled over rows of two values; its sequence is 100.
    fn one_text() -> (
        EmbeddingWork,
        Scheduler,
        oneshot::Receiver<Result<Embedded, String>>,
    ) {
        let mut work = EmbeddingWork::new(None, Some(Pooling::Mean), 2);
        let mut sched = Scheduler::new(SchedulerConfig::default());
        let (answer, answered) = oneshot::channel();
        let waiting = Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap();
        let request = EmbedRequest {
            id: 7,
            model: EmbeddingModel::Generation,
            texts: vec![vec![1, 2, 3, 4]],
            arrival: Instant::now(),
            answer,
            span: tracing::Span::none(),
        };
        work.admit_pooled(EmbedSubmitted { request, waiting }, &mut sched, 0.0, || 100);
        (work, sched, answered)
    }

    fn slice(rows: &[f32], from_start: bool, whole: bool) -> PooledSlice {
        PooledSlice {
            seq: 100,
            rows: rows.to_vec(),
            from_start,
            whole,
        }
    }

    #[test]
    fn the_mean_runs_over_every_slice_of_the_text() {
        let (mut work, mut sched, mut answered) = one_text();
        let now = Instant::now();
        work.pool(
            slice(&[1.0, 0.0, 3.0, 0.0], true, false),
            now,
            &mut sched,
            &Quiet,
        );
        work.pool(
            slice(&[0.0, 2.0, 0.0, 6.0], false, true),
            now,
            &mut sched,
            &Quiet,
        );
        let v = answered.try_recv().unwrap().unwrap().vectors.remove(0);
        // The mean (1, 2) over four rows, at unit length.
        let n = 5f32.sqrt();
        assert!(
            (v[0] - 1.0 / n).abs() < 1e-6 && (v[1] - 2.0 / n).abs() < 1e-6,
            "{v:?}"
        );
        assert!(work.is_empty() && sched.sequence(100).is_none());
    }

    #[test]
    fn a_text_read_again_after_preemption_pools_afresh() {
        let (mut work, mut sched, mut answered) = one_text();
        let now = Instant::now();
        work.pool(
            slice(&[9.0, 0.0, 9.0, 0.0], true, false),
            now,
            &mut sched,
            &Quiet,
        );
        // Preempted: the text is read again from its first token.
        work.pool(
            slice(&[0.0, 1.0, 0.0, 1.0], true, false),
            now,
            &mut sched,
            &Quiet,
        );
        work.pool(
            slice(&[0.0, 1.0, 0.0, 1.0], false, true),
            now,
            &mut sched,
            &Quiet,
        );
        let v = answered.try_recv().unwrap().unwrap().vectors.remove(0);
        assert_eq!(
            v,
            vec![0.0, 1.0],
            "the rows read before the preemption are not counted"
        );
    }
}
