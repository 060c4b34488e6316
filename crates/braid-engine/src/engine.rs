//! The engine loop: admit, drop the departed, plan, forward, sample, commit, report, send.
//!
//! Every step carries every running decode plus whatever prompt slices the planner
//! (braid-sched) fits under the latency target, as one forward. Requests arrive over a
//! channel and leave through their own event channels; a closed event channel is a client
//! that left, and its sequence is freed before the next step. With prefix caching a chunk may
//! start past 0 on admission: the K/V before it are in cached blocks shared with other
//! sequences, and the engine, which only ever feeds a chunk's own positions, needs to do
//! nothing about it.
//!
//! A request ends in one of two ways, and either way the engine reports it finished exactly
//! once (`Engine::finish`): the scheduler ends it when a token is committed (a stop token,
//! `max_tokens`, the end of the context), or the server ends it for what only it can see (a
//! stop string in the text, its deadline) and says so on the request channel
//! (`EngineMessage::Finish`), before it lets go of the request's events. A request whose
//! events close without that is a client that left: freed, logged, never reported finished.
//!
//! A failing step (model error or panic) must not leave anyone hanging: every request in
//! flight gets a `Failed` event, the scheduler starts afresh (its new block allocator and
//! prefix cache never read the old blocks, so the KV pool's memory is simply reused), and the
//! engine keeps serving. A panic outside a step ends the thread; the process then exits, as
//! nothing could answer its requests any more.

use crate::config::EngineConfig;
use crate::draft_model::{vocabulary_mismatch, DraftModel};
use crate::drafter::{RecentAnswers, SequenceDrafter, Speculation};
use crate::embedding_work::{EmbeddingWork, PooledSlice};
use crate::handle::{EngineHandle, EngineMessage, EngineShared, Submitted};
use crate::observer::{EngineInfo, EngineObserver, RequestEvent, StepStats, TokenTiming};
use crate::request::{EmbeddingModel, EngineEvent, EngineRequest, Finished, PredictionUsage};
use braid_embedding::SentenceEmbedder;
use braid_model::{score_token, BatchEntry, KvPool, LoadedModel, Sampled, Sampler, Workspace};
use braid_sched::{
    CacheEvent, DraftSource, FinishReason, Scheduler, SchedulerConfig, SeqId, SeqState,
    StepFeatures, StepPlan, StopConditions,
};
use rayon::prelude::*;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::OwnedSemaphorePermit;

/// Starts the engine thread on `model` (and `embedder`, whose texts share its steps) and
/// returns the handle requests are submitted to. The compute pool should be set up first
/// (`compute_pool::init`), or rayon starts its default one.
pub fn spawn_engine(
    model: Option<Arc<LoadedModel>>,
    embedder: Option<Arc<SentenceEmbedder>>,
    cfg: EngineConfig,
    observer: Arc<dyn EngineObserver>,
) -> anyhow::Result<EngineHandle> {
    let pooling = cfg.pooling.filter(|_| model.is_some());
    let hidden_size = model.as_ref().map_or(0, |m| m.config().hidden);
    let sched_cfg = match &model {
        Some(m) => cfg.scheduler_config(m.config())?,
        None if embedder.is_some() => cfg.embedding_scheduler_config()?,
        None => anyhow::bail!("the engine needs a generation model, an embedding model or both"),
    };
    let num_blocks = sched_cfg.num_blocks;
    let draft = match (&model, cfg.draft_model.clone()) {
        (Some(target), Some(draft)) => {
            if let Some(why) = vocabulary_mismatch(target, &draft) {
                anyhow::bail!(why);
            }
            tracing::info!(
                draft_model = %draft.path.display(),
                "drafting with a draft model; its KV pool has the same {num_blocks} blocks"
            );
            Some(DraftModel::new(
                draft,
                cfg.block_size,
                num_blocks,
                cfg.kv_cache_dtype,
            ))
        }
        (None, Some(_)) => anyhow::bail!("a draft model drafts for a generation model"),
        (_, None) => None,
    };
    observer.started(&EngineInfo {
        block_size: cfg.block_size,
        num_blocks,
        prefix_caching: cfg.prefix_caching,
        itl_target: cfg.itl_target,
        kv_cache_dtype: cfg.kv_cache_dtype.name(),
    });
    let (tx, rx) = mpsc::channel();
    let handle = EngineHandle::new(tx, sched_cfg.clone(), cfg.max_waiting);
    let shared = handle.shared().clone();
    tracing::info!(
        kv_blocks = num_blocks,
        kv_tokens = num_blocks * cfg.block_size,
        kv_dtype = %cfg.kv_cache_dtype,
        threads = rayon::current_num_threads(),
        "engine starting"
    );
    std::thread::Builder::new()
        .name("braid-engine".into())
        .spawn(move || {
            let mut engine = Engine {
                epoch: Instant::now(),
                sched: Scheduler::new(sched_cfg.clone()),
                cache_events: observer.wants_cache_events(),
                kv: model.as_ref().map(|m| {
                    KvPool::with_dtype(m.config(), cfg.block_size, num_blocks, cfg.kv_cache_dtype)
                }),
                sched_cfg,
                model,
                ws: Workspace::default(),
                active: HashMap::new(),
                shared: shared.clone(),
                observer,
                steps: 0,
                embeddings: (embedder.is_some() || pooling.is_some())
                    .then(|| EmbeddingWork::new(embedder, pooling, hidden_size)),
                speculation: cfg.speculation,
                recent: RecentAnswers::new(RECENT_ANSWER_TOKENS),
                draft,
            };
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                // After calibrating, which ends with a fresh scheduler.
                engine.calibrate();
                engine.shared.calibrated.store(true, Ordering::Release);
                engine.start_cache_events();
                engine.run(rx);
            }));
            shared.alive.store(false, Ordering::Release);
            if let Err(panic) = outcome {
                tracing::error!(
                    "the engine thread died ({}); exiting",
                    panic_message(&*panic)
                );
                // Dropping the engine closes every request's channel: handlers answer 500.
                drop(engine);
                std::thread::sleep(Duration::from_secs(1));
                std::process::exit(70);
            }
        })?;
    Ok(handle)
}

/// What the engine keeps for one request besides the scheduler's sequence.
struct Active {
    events: UnboundedSender<EngineEvent>,
    sampler: Sampler,
    prompt_tokens: usize,
    /// The prompt being scored, until its scores are sent.
    scores: Option<PromptScores>,
    /// `max_tokens: 0`: the one token sampled after the prompt is not sent.
    score_only: bool,
    arrival: Instant,
    /// Its place in the waiting queue, until first scheduled.
    waiting: Option<OwnedSemaphorePermit>,
    last_token: Option<Instant>,
    /// Tokens sent to it.
    generated: usize,
    /// Prompt tokens found in the prefix cache when it was first scheduled.
    cached_tokens: usize,
    queue_secs: Option<f64>,
    span: tracing::Span,
    drafter: SequenceDrafter,
}

/// Tokens of recent answers kept for drafting (4 bytes each): enough for many agents' turns.
const RECENT_ANSWER_TOKENS: usize = 1 << 20;

pub(crate) struct Engine {
    epoch: Instant,
    pub(crate) sched: Scheduler,
    pub(crate) sched_cfg: SchedulerConfig,
    /// The generation model and its KV pool; None when the engine only embeds.
    pub(crate) model: Option<Arc<LoadedModel>>,
    pub(crate) kv: Option<KvPool>,
    pub(crate) ws: Workspace,
    active: HashMap<SeqId, Active>,
    pub(crate) shared: Arc<EngineShared>,
    observer: Arc<dyn EngineObserver>,
    /// Steps run by the engine loop.
    steps: u64,
    /// The observer wants the prefix cache's events.
    cache_events: bool,
    /// The embedding model and its requests, when one is served.
    pub(crate) embeddings: Option<EmbeddingWork>,
    speculation: Speculation,
    /// Answers of finished requests, a draft source for everyone.
    recent: RecentAnswers,
    /// The draft model, which drafts where the other sources have nothing.
    pub(crate) draft: Option<DraftModel>,
}

/// What a step's forward gives back: each sampled chunk's tokens (one, or more where a draft
/// was accepted), and the hidden rows of each text read for an embedding.
type ForwardOutput = (Vec<(SeqId, Vec<Sampled>)>, Vec<PooledSlice>);

/// One sampled chunk's rows of logits: its last row, or a verified draft's rows.
struct RowsToSample<'a> {
    id: SeqId,
    sampler: &'a mut Sampler,
    logits: &'a [f32],
    /// The drafted tokens fed after the first row, one per row after it.
    draft: &'a [u32],
    stops: &'a [u32],
}

impl RowsToSample<'_> {
    /// Samples the rows in order until a sample differs from the drafted token fed after it, or
    /// ends the answer.
    fn sample(&mut self, vocab: usize) -> Vec<Sampled> {
        let mut tokens = Vec::with_capacity(1 + self.draft.len());
        for (i, row) in self.logits.chunks_exact(vocab).enumerate() {
            let s = self.sampler.sample(row);
            let agreed = self.draft.get(i) == Some(&s.token) && !self.stops.contains(&s.token);
            tokens.push(s);
            if !agreed {
                break;
            }
        }
        tokens
    }
}

/// A token sampled in this step, as the step will report and send it.
struct Outgoing {
    id: SeqId,
    token: Sampled,
    /// None for a stop token (not sent).
    timing: Option<TokenTiming>,
    end: Option<FinishReason>,
}

impl Engine {
    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Nothing to run: no generation or embedding request in flight.
    fn idle(&self) -> bool {
        self.active.is_empty() && self.embeddings.as_ref().is_none_or(EmbeddingWork::is_empty)
    }

    fn run(&mut self, rx: mpsc::Receiver<EngineMessage>) {
        loop {
            if self.idle() {
                match rx.recv() {
                    Ok(message) => self.receive(message),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(message) => self.receive(message),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) if self.idle() => return,
                    Err(mpsc::TryRecvError::Disconnected) => break,
                }
            }
            self.drop_departed(&rx);
            let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.propose_drafts();
                let plan = self.sched.plan(self.now());
                if plan.is_empty() {
                    self.report_preempted(&plan);
                } else {
                    self.step(&plan);
                }
                !plan.is_empty()
            }));
            match stepped {
                Ok(true) => {}
                Ok(false) if !self.idle() => std::thread::sleep(Duration::from_millis(1)),
                Ok(false) => {}
                Err(panic) => self.fail_all(&format!("engine panic: {}", panic_message(&*panic))),
            }
            self.publish();
            self.report_cache_events();
        }
    }

    /// A fresh scheduler's cache is empty: the observer hears so, and of every change after.
    fn start_cache_events(&mut self) {
        if self.cache_events {
            self.sched.enable_cache_events();
            self.observer.cache_events(&[CacheEvent::AllCleared]);
        }
    }

    fn report_cache_events(&mut self) {
        if self.cache_events {
            let events = self.sched.take_cache_events();
            if !events.is_empty() {
                self.observer.cache_events(&events);
            }
        }
    }

    fn receive(&mut self, message: EngineMessage) {
        match message {
            EngineMessage::Submit(sub) => self.admit(*sub),
            EngineMessage::Embed(sub) => {
                let arrival = sub.request.arrival;
                let arrival_secs = arrival.saturating_duration_since(self.epoch).as_secs_f64();
                let shared = self.shared.clone();
                match (sub.request.model, self.embeddings.as_mut()) {
                    (EmbeddingModel::Sentence, Some(work)) if work.embedder.is_some() => {
                        work.admit(*sub, &mut self.sched, arrival_secs)
                    }
                    (EmbeddingModel::Generation, Some(work)) if work.pooling.is_some() => work
                        .admit_pooled(*sub, &mut self.sched, arrival_secs, || {
                            shared.next_id.fetch_add(1, Ordering::Relaxed)
                        }),
                    // Validation sends embeddings only to a model that makes them.
                    _ => {
                        let _ = sub
                            .request
                            .answer
                            .send(Err("this model does not embed".into()));
                    }
                }
            }
            EngineMessage::Finish {
                id,
                reason,
                completion_tokens,
            } => {
                // Not active: the scheduler ended it first, and it is already reported.
                if self.active.contains_key(&id) {
                    if let Some(seq) = self.sched.sequence(id) {
                        self.recent.add(&seq.tokens[seq.prompt_len..]);
                    }
                    self.sched.abort(id);
                    self.finish(id, reason, completion_tokens, None);
                }
            }
            EngineMessage::FlushPrefixCache(answer) => {
                let dropped = self.sched.flush_prefix_cache();
                tracing::info!(dropped, "prefix cache flushed");
                let _ = answer.send(dropped);
            }
        }
    }

    fn admit(&mut self, sub: Submitted) {
        let max_new_tokens = sub.request.max_new_tokens();
        let EngineRequest {
            id,
            prompt,
            max_tokens,
            score_prompt,
            shares_prompt_with,
            first_of_request,
            params,
            constraint,
            prediction,
            stop_token_ids,
            arrival,
            events,
            span,
        } = sub.request;
        let arrival_secs = arrival.saturating_duration_since(self.epoch).as_secs_f64();
        let prompt_tokens = prompt.len();
        let sampler = Sampler::new(params, &prompt).with_constraint(constraint);
        let scores = score_prompt.map(|top| PromptScores::new(&prompt, top));
        let stop = StopConditions {
            max_new_tokens,
            stop_token_ids,
        };
        self.sched.add(id, prompt, stop, arrival_secs);
        if scores.is_some() {
            self.sched.score_prompt(id);
        }
        if let Some(leader) = shares_prompt_with {
            self.sched.share_prompt(id, leader);
        }
        if let Some(first) = first_of_request {
            self.sched.same_request(id, first);
        }
        self.observer
            .request(id, &RequestEvent::Queued { prompt_tokens });
        self.active.insert(
            id,
            Active {
                events,
                sampler,
                prompt_tokens,
                scores,
                score_only: max_tokens == 0,
                arrival,
                waiting: Some(sub.waiting),
                last_token: None,
                generated: 0,
                cached_tokens: 0,
                queue_secs: None,
                span,
                drafter: SequenceDrafter::new(prediction),
            },
        );
    }

    /// Frees the requests whose event channels closed. The server sends its `Finish` before
    /// it closes a channel, so the messages that came meanwhile are read first: only a request
    /// still active after them had a client that left.
    fn drop_departed(&mut self, rx: &mpsc::Receiver<EngineMessage>) {
        if let Some(work) = self.embeddings.as_mut() {
            work.drop_departed(&mut self.sched);
        }
        let closed: Vec<SeqId> = self
            .active
            .iter()
            .filter(|(_, a)| a.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        if closed.is_empty() {
            return;
        }
        while let Ok(message) = rx.try_recv() {
            self.receive(message);
        }
        for id in closed {
            if let Some(a) = self.active.remove(&id) {
                self.sched.abort(id);
                departed(id, &a);
            }
        }
    }

    fn step(&mut self, plan: &StepPlan) {
        let shared = self.shared.clone();
        let _watch = shared.step.begin();
        self.steps += 1;
        let scheduled = Instant::now();
        // A request leaves the waiting count below as it joins the running one: a drain that
        // waits for both to reach zero must never see it in neither.
        self.publish();
        for c in &plan.chunks {
            if let Some(a) = self.active.get_mut(&c.seq) {
                if a.waiting.take().is_some() {
                    let queue_time = scheduled.saturating_duration_since(a.arrival);
                    a.queue_secs = Some(queue_time.as_secs_f64());
                    a.cached_tokens = self.sched.sequence(c.seq).map_or(0, |s| s.cached_tokens);
                    self.observer
                        .request(c.seq, &RequestEvent::Scheduled { queue_time });
                }
            }
        }
        // After the requests are counted as running: a stalled step still holds them.
        if let Some(stall) = crate::step_watch::injected_stall(self.steps) {
            tracing::warn!(
                "BRAID_FAULT_STALL_STEP: step {} stalls {stall:?}",
                self.steps
            );
            std::thread::sleep(stall);
        }
        let started = Instant::now();
        if let Some(kv) = self.kv.as_mut() {
            for &(src, dst) in &plan.block_copies {
                kv.copy_block(src, dst);
            }
        }
        // The draft model's passes after its first, which the cost model does not predict.
        let mut pass_secs = 0.0;
        if let Some(draft) = self.draft.as_mut() {
            draft.copy_blocks(&plan.block_copies);
            let embeddings = self.embeddings.as_ref();
            let pooled = |id| embeddings.is_some_and(|w| w.is_pooled(id));
            match draft.run(plan, &mut self.sched, pooled) {
                Ok((passes, secs)) => {
                    self.sched.observe_draft_passes(passes, secs);
                    pass_secs = secs;
                }
                Err(e) => return self.fail_all(&format!("draft model error: {e}")),
            }
        }
        let (sampled, pooled) = if plan.chunks.is_empty() {
            Default::default()
        } else {
            match self.forward_and_sample(plan) {
                Ok(s) => s,
                Err(e) => return self.fail_all(&format!("model error: {e}")),
            }
        };
        if let Some(work) = self.embeddings.as_mut() {
            // Texts the generation model read: pooled, and ended (before the commit) once read
            // whole; then the sentence model's texts.
            for slice in pooled {
                work.pool(slice, started, &mut self.sched, &*self.observer);
            }
            if let Err(e) = work.run(plan.embeddings.as_ref(), started, &*self.observer) {
                return self.fail_all(&format!("embedding model error: {e}"));
            }
        }
        let ids: Vec<(SeqId, u32)> = sampled
            .iter()
            .flat_map(|(id, tokens)| tokens.iter().map(|s| (*id, s.token)))
            .collect();
        let drafts = self.count_verified(plan, &sampled);
        let finished: Vec<(SeqId, FinishReason)> = self
            .sched
            .commit(plan, &ids)
            .into_iter()
            .map(|f| {
                self.recent.add(&f.seq.tokens[f.seq.prompt_len..]);
                (f.seq.id, f.reason)
            })
            .collect();
        let duration = started.elapsed();
        self.sched
            .observe_step(StepFeatures::of(plan), duration.as_secs_f64() - pass_secs);
        self.report_preempted(plan);

        let now = Instant::now();
        let mut outgoing = Vec::with_capacity(ids.len());
        let mut token_gaps = Vec::new();
        for (id, tokens) in sampled {
            let Some(a) = self.active.get_mut(&id) else {
                continue;
            };
            // A step ends few sequences: a scan beats building a map every step.
            let end = finished
                .iter()
                .find(|f| f.0 == id)
                .map(|&(_, reason)| reason);
            let last = tokens.len() - 1;
            for (i, token) in tokens.into_iter().enumerate() {
                let end = end.filter(|_| i == last);
                let timing = match end {
                    Some(FinishReason::Stop) => None,
                    _ if a.score_only => None,
                    _ => {
                        // Tokens after the first of a verified draft come with it: no gap.
                        let timing = match a.last_token {
                            Some(_) if i > 0 => TokenTiming::Next(Duration::ZERO),
                            Some(last) => {
                                let gap = now.duration_since(last);
                                token_gaps.push(gap);
                                TokenTiming::Next(gap)
                            }
                            None => TokenTiming::First(now.duration_since(a.arrival)),
                        };
                        a.last_token = Some(now);
                        a.generated += 1;
                        Some(timing)
                    }
                };
                outgoing.push(Outgoing {
                    id,
                    token,
                    timing,
                    end,
                });
            }
        }
        self.observer.step(&StepStats {
            at: self.epoch.elapsed(),
            prefill_tokens: plan.num_prefill_tokens(),
            decode_tokens: plan.num_decodes(),
            duration,
            predicted: plan.predicted_secs.map(Duration::from_secs_f64),
            planned_to: plan.planned_to_secs.map(Duration::from_secs_f64),
            finished,
            preempted: plan.preempted.clone(),
            prefix_cache: plan.prefix_cache,
            kv_usage: self.sched.kv_usage(),
            running: self.sched.num_running(),
            waiting: self.shared.num_waiting(),
            token_gaps,
            embed_texts: plan.num_embed_texts(),
            embed_tokens: plan.num_embed_tokens(),
            drafts,
        });
        // The gauges first: a client that has a token sees its request counted.
        self.publish();
        for out in outgoing {
            self.send(out);
        }
    }

    /// Sends one sampled token to its request, and the ending if it was the last.
    fn send(&mut self, out: Outgoing) {
        let Some(a) = self.active.get_mut(&out.id) else {
            return;
        };
        if let Some(scores) = a.scores.take() {
            let _ = a.events.send(EngineEvent::PromptScored(scores.scored));
        }
        let a = &*a;
        if let Some(timing) = out.timing {
            self.observer.request(out.id, &RequestEvent::Token(timing));
        }
        match out.end {
            None => {
                // A closed channel is freed before the next step.
                let _ = a.events.send(EngineEvent::Token {
                    token: out.token,
                    finished: None,
                });
            }
            // The server ended it or the client left, just as its last token came: which of
            // the two is settled before the next step (`drop_departed`).
            Some(_) if a.events.is_closed() => {}
            Some(reason) => {
                let last = out.timing.map(|_| out.token);
                let generated = a.generated;
                self.finish(out.id, reason, generated, last);
            }
        }
    }

    /// The step's sampled tokens, and the hidden rows of the texts read for an embedding.
    fn forward_and_sample(&mut self, plan: &StepPlan) -> braid_model::Result<ForwardOutput> {
        let sequence = |id| self.sched.sequence(id).expect("planned sequence exists");
        let fed: Vec<_> = plan
            .chunks
            .iter()
            .map(|c| c.tokens(sequence(c.seq)))
            .collect();
        let mut entries = Vec::with_capacity(plan.chunks.len());
        for (c, tokens) in plan.chunks.iter().zip(&fed) {
            let seq = sequence(c.seq);
            // A text read for an embedding wants its hidden rows, never logits or a sample.
            let pooled = self.embeddings.as_ref().is_some_and(|w| w.is_pooled(c.seq));
            entries.push(BatchEntry {
                tokens,
                start: c.start,
                block_table: &seq.block_table,
                sample: c.sample && !pooled,
                all_logits: (c.all_logits || c.drafted > 0) && !pooled,
                hidden: pooled,
                // A prompt read to be scored (echo, prompt_logprobs, a pooled text) is computed
                // in f32 throughout, as generation computes the tokens it scores.
                prompt_len: if seq.score_prompt { 0 } else { seq.prompt_len },
            });
        }
        // Where each chunk's logits start, and the rows each sampled chunk samples from: a
        // scored prompt's chunk brings every row's logits, a verified draft its own rows, any
        // other its last row if sampled.
        let mut first_rows = Vec::with_capacity(entries.len());
        let mut sampled_rows = Vec::with_capacity(plan.num_samples());
        let mut row = 0;
        for (c, e) in plan.chunks.iter().zip(&entries) {
            first_rows.push(row);
            row += e.logit_rows();
            if e.sample {
                sampled_rows.push((c.seq, row - 1 - c.drafted, c.drafted));
            }
        }
        // Structured outputs' masks depend only on the tokens already taken: they are computed
        // on a thread of their own while the forward pass runs, not after it.
        let mut masked: Vec<&mut Sampler> = self
            .active
            .iter_mut()
            .filter(|(id, a)| {
                a.sampler.masks_next() && sampled_rows.iter().any(|(seq, ..)| seq == *id)
            })
            .map(|(_, a)| &mut a.sampler)
            .collect();
        // Only admitted requests have chunks, and only a server with a generation model admits.
        let generation = "a generation step runs on the generation model";
        let (model, kv, ws) = (
            &self.model.as_ref().expect(generation).model,
            self.kv.as_mut().expect(generation),
            &mut self.ws,
        );
        let (logits, hidden) = std::thread::scope(|s| {
            if !masked.is_empty() {
                s.spawn(|| masked.iter_mut().for_each(|m| m.prepare_mask()));
            }
            model.forward_with_hidden(&entries, kv, ws)
        })?;
        let dim = model.config.hidden;
        let mut pooled = Vec::new();
        let mut hidden_row = 0;
        for (c, e) in plan.chunks.iter().zip(&entries) {
            if e.hidden {
                let rows = &hidden[hidden_row * dim..(hidden_row + c.len) * dim];
                pooled.push(PooledSlice {
                    seq: c.seq,
                    rows: rows.to_vec(),
                    from_start: c.start == 0,
                    whole: c.sample,
                });
                hidden_row += c.len;
            }
        }
        let vocab = self.model.as_ref().expect(generation).config().vocab_size;
        let row_logits = |row: usize| &logits[row * vocab..(row + 1) * vocab];
        for ((c, e), first) in plan.chunks.iter().zip(&entries).zip(first_rows) {
            if !e.all_logits || c.drafted > 0 {
                continue;
            }
            let a = self
                .active
                .get_mut(&c.seq)
                .expect("planned sequence is active");
            if let Some(scores) = a.scores.as_mut() {
                for i in 0..c.len {
                    scores.score(c.start + i, row_logits(first + i));
                }
            }
        }
        // Each row is sampled on the compute pool: a structured output's grammar mask is real
        // work for every sequence (`braid bench scaling --json-schema` measures its cost; see
        // docs/benchmarks/HISTORY.md), and every sampler owns its state (RNG, grammar), so the
        // result does not depend on which thread ran it.
        let mut samplers: HashMap<SeqId, &mut Sampler> = self
            .active
            .iter_mut()
            .map(|(&id, a)| (id, &mut a.sampler))
            .collect();
        // A verified draft's rows are sampled in order, as plain decoding would sample them one
        // step at a time, until a sample differs from the drafted token fed after it (or ends
        // the answer): the tokens, logprobs and RNG draws are exactly plain decoding's.
        let mut rows: Vec<RowsToSample> = sampled_rows
            .into_iter()
            .map(|(id, row, drafted)| {
                let sampler = samplers.remove(&id).expect("planned sequence is active");
                let seq = self.sched.sequence(id).expect("planned sequence exists");
                RowsToSample {
                    id,
                    sampler,
                    logits: &logits[row * vocab..(row + 1 + drafted) * vocab],
                    draft: &seq.draft[..drafted],
                    stops: &seq.stop_token_ids,
                }
            })
            .collect();
        let sampled = rows
            .par_iter_mut()
            .map(|rows| (rows.id, rows.sample(vocab)))
            .collect();
        Ok((sampled, pooled))
    }

    /// Reports a request finished, the one way every finished request is reported, and
    /// tells it (with its last token, unless that was a stop token), after the gauges and the
    /// observer have seen it go. Its sequence is already out of the scheduler. The request's
    /// log line is the server's, written when it has answered.
    fn finish(
        &mut self,
        id: SeqId,
        reason: FinishReason,
        completion_tokens: usize,
        last: Option<Sampled>,
    ) {
        let Some(a) = self.active.remove(&id) else {
            return;
        };
        self.observer.request(
            id,
            &RequestEvent::Finished {
                reason,
                prompt_tokens: a.prompt_tokens,
                completion_tokens,
                e2e: a.arrival.elapsed(),
            },
        );
        // Before the client hears "done", so a client that then reads the gauges sees it gone.
        self.publish();
        let finished = Finished {
            reason,
            prompt_tokens: a.prompt_tokens,
            completion_tokens,
            cached_tokens: a.cached_tokens,
            queue_secs: a.queue_secs,
            prediction: a.drafter.prediction.as_ref().map(|p| PredictionUsage {
                accepted: p.accepted,
                rejected: p.rejected(),
            }),
        };
        let _ = a.events.send(match last {
            Some(token) => EngineEvent::Token {
                token,
                finished: Some(finished),
            },
            None => EngineEvent::Done(finished),
        });
    }

    /// Hands the scheduler a draft for every decoding sequence that has one (it decides how
    /// much of each the step verifies).
    fn propose_drafts(&mut self) {
        let spec = self.speculation;
        for (&id, a) in self.active.iter_mut() {
            if !spec.ngram && a.drafter.prediction.is_none() && self.draft.is_none() {
                continue;
            }
            let Some(seq) = self.sched.sequence(id) else {
                continue;
            };
            if seq.state != SeqState::Decoding || a.score_only {
                continue;
            }
            let (draft, source) = a
                .drafter
                .draft(&seq.tokens, seq.prompt_len, &self.recent, spec);
            if !draft.is_empty() {
                self.sched.set_draft(id, draft, source);
            } else if let Some(model) = &self.draft {
                // Its tokens are written once the plan says how many (`DraftModel::run`).
                if model.can_draft(id, seq.tokens.len(), spec.max_tokens) {
                    self.sched
                        .set_draft(id, vec![0; spec.max_tokens], DraftSource::Model);
                }
            }
        }
    }

    /// Each verified draft of the step: (drafted, accepted). Tells each request's drafter how
    /// its draft fared.
    fn count_verified(
        &mut self,
        plan: &StepPlan,
        sampled: &[(SeqId, Vec<Sampled>)],
    ) -> Vec<(usize, usize)> {
        let mut drafts = Vec::new();
        for c in plan.chunks.iter().filter(|c| c.drafted > 0) {
            let Some((_, tokens)) = sampled.iter().find(|(id, _)| *id == c.seq) else {
                continue;
            };
            let accepted = tokens.len() - 1;
            if let Some(a) = self.active.get_mut(&c.seq) {
                a.drafter.verified(accepted);
            }
            if let Some(draft) = self.draft.as_mut() {
                draft.verified(c.seq, c.start, accepted);
            }
            drafts.push((c.drafted, accepted));
        }
        drafts
    }

    fn report_preempted(&self, plan: &StepPlan) {
        for &id in &plan.preempted {
            if let Some(a) = self.active.get(&id) {
                tracing::debug!(parent: &a.span, id, "preempted: its KV blocks went to older sequences");
            }
            self.observer.request(id, &RequestEvent::Preempted);
        }
    }

    fn fail_all(&mut self, message: &str) {
        tracing::error!(
            requests = self.active.len(),
            embedding_requests = self.embeddings.as_ref().map_or(0, EmbeddingWork::len),
            "{message}; failing every request in flight and starting afresh"
        );
        self.sched =
            Scheduler::with_cost_model(self.sched_cfg.clone(), self.sched.cost_model().clone());
        self.start_cache_events();
        self.ws = Workspace::default();
        self.publish();
        for (_, a) in self.active.drain() {
            let _ = a.events.send(EngineEvent::Failed(message.to_string()));
        }
        if let Some(work) = self.embeddings.as_mut() {
            work.fail_all(message);
        }
    }

    fn publish(&self) {
        self.shared
            .running
            .store(self.sched.num_running(), Ordering::Release);
        self.shared
            .kv_usage_ppm
            .store((self.sched.kv_usage() * 1e6) as u64, Ordering::Release);
    }
}

/// A prompt being scored: each token's log-probability under the logits of the row before it.
struct PromptScores {
    top: usize,
    /// One per prompt token; the first is never scored (nothing comes before it).
    scored: Vec<Sampled>,
    scratch: Vec<(f32, u32)>,
}

impl PromptScores {
    fn new(prompt: &[u32], top: usize) -> Self {
        Self {
            top,
            scored: prompt
                .iter()
                .map(|&token| Sampled {
                    token,
                    logprob: None,
                    top: Vec::new(),
                    rank: None,
                })
                .collect(),
            scratch: Vec::new(),
        }
    }

    /// Scores the token after `position` with that position's logits. Positions past the
    /// prompt (recomputed generated tokens after a preemption) are not the prompt's.
    fn score(&mut self, position: usize, logits: &[f32]) {
        if let Some(next) = self.scored.get_mut(position + 1) {
            *next = score_token(logits, next.token, self.top, &mut self.scratch);
        }
    }
}

/// Logs a request whose client went away; its permit and sequence are already let go.
fn departed(id: SeqId, a: &Active) {
    tracing::debug!(
        parent: &a.span,
        id,
        prompt_tokens = a.prompt_tokens,
        completion_tokens = a.generated,
        "sequence of a departed client freed"
    );
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic")
}
