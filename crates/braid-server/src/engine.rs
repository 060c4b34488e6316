//! The engine thread: plan → forward → sample → send, one step after another.
//!
//! It is a plain OS thread, not a tokio task: a step is tens of milliseconds of pure CPU work
//! and would starve the HTTP runtime. Every step carries every running decode plus whatever
//! prompt slices the planner (braid-sched) fits under the latency target, as one forward.
//! Requests arrive over a channel and leave through their own event channels; a closed event
//! channel is a client that left, and its sequence is freed before the next step.
//! With prefix caching a chunk may start past 0 on admission: the K/V before it are in cached
//! blocks shared with other sequences, and the engine, which only ever feeds a chunk's own
//! positions, needs to do nothing about it.
//!
//! A failing step (model error or panic) must not leave anyone hanging: every request in
//! flight gets a `Failed` event (a 500 for its client), the scheduler and KV pool start afresh,
//! and the engine keeps serving.

use crate::engine_handle::{
    EngineEvent, EngineHandle, EngineRequest, EngineShared, FinishReason, Finished, StepRecord,
};
use crate::metrics::Metrics;
use braid_model::{BatchEntry, KvPool, LoadedModel, Sampler, Workspace};
use braid_sched::{
    CostModel, PrefixCacheStats, Scheduler, SchedulerConfig, StepFeatures, StepPlan,
};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Engine settings, from `braid serve`'s flags.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub kv_cache_mb: usize,
    pub block_size: usize,
    pub max_num_seqs: usize,
    pub max_batched_tokens: usize,
    pub max_waiting: usize,
    pub chunked_prefill: bool,
    /// None disables the latency target (only `max_batched_tokens` bounds a step).
    pub itl_target: Option<Duration>,
    pub starvation_after: Duration,
    /// Reuse the K/V of cached prompt prefixes (`--no-prefix-cache` turns it off).
    pub prefix_caching: bool,
}

/// Starts the engine thread on `model` and returns the handle handlers submit to.
pub fn spawn_engine(
    model: Arc<LoadedModel>,
    cfg: EngineConfig,
    metrics: Arc<Metrics>,
) -> anyhow::Result<EngineHandle> {
    let mc = model.config();
    let num_blocks = KvPool::blocks_for_budget(mc, cfg.block_size, cfg.kv_cache_mb);
    let sched_cfg = SchedulerConfig {
        block_size: cfg.block_size,
        num_blocks,
        max_num_seqs: cfg.max_num_seqs,
        max_batched_tokens: cfg.max_batched_tokens,
        // Admission is bounded by the handle; preempted sequences always go back in line.
        max_waiting: cfg.max_waiting + cfg.max_num_seqs,
        max_model_len: mc.context_length,
        chunked_prefill: cfg.chunked_prefill,
        itl_target: cfg.itl_target,
        starvation_after: cfg.starvation_after,
        min_prefill_chunk: 16.min(cfg.max_batched_tokens),
        prefix_caching: cfg.prefix_caching,
    };
    sched_cfg
        .validate()
        .map_err(|e| anyhow::anyhow!("engine settings: {e}"))?;
    if num_blocks * cfg.block_size < 2 * cfg.block_size {
        anyhow::bail!(
            "--kv-cache-mb {} holds fewer than two blocks of {} tokens for this model",
            cfg.kv_cache_mb,
            cfg.block_size
        );
    }
    if !cfg.block_size.is_multiple_of(16) {
        anyhow::bail!(
            "--block-size {} must be a multiple of 16 (attention scores 16 cached keys at a time)",
            cfg.block_size
        );
    }
    metrics
        .cache_config_info
        .with_label_values(&[
            cfg.block_size.to_string().as_str(),
            num_blocks.to_string().as_str(),
            if cfg.prefix_caching { "True" } else { "False" },
        ])
        .set(1);
    let shared = Arc::new(EngineShared::default());
    shared.alive.store(true, Ordering::Release);
    let (tx, rx) = mpsc::channel();
    let (steps, _) = tokio::sync::broadcast::channel(1024);
    let handle = EngineHandle::new(tx, shared.clone(), cfg.max_waiting, steps.clone());
    tracing::info!(
        kv_blocks = num_blocks,
        kv_tokens = num_blocks * cfg.block_size,
        kernel = braid_model::int8_matmul::kernel_name(),
        threads = rayon::current_num_threads(),
        "engine starting"
    );
    std::thread::Builder::new()
        .name("braid-engine".into())
        .spawn(move || {
            let kv = KvPool::new(model.config(), cfg.block_size, num_blocks);
            let mut engine = Engine {
                epoch: Instant::now(),
                cost: CostModel::default(),
                sched: Scheduler::new(sched_cfg.clone()),
                sched_cfg,
                model,
                kv,
                ws: Workspace::default(),
                active: HashMap::new(),
                shared: shared.clone(),
                metrics,
                preemptions_seen: 0,
                prefix_seen: PrefixCacheStats::default(),
                steps,
            };
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                engine.calibrate();
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
    stop_token_ids: Vec<u32>,
    max_tokens: usize,
    prompt_tokens: usize,
    arrival: Instant,
    /// Still counted in the handle's waiting counter (not yet scheduled once).
    waiting: bool,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    generated: usize,
    id_for_log: u64,
    queue_secs: Option<f64>,
}

struct Engine {
    epoch: Instant,
    cost: CostModel,
    sched: Scheduler,
    sched_cfg: SchedulerConfig,
    model: Arc<LoadedModel>,
    kv: KvPool,
    ws: Workspace,
    active: HashMap<u64, Active>,
    shared: Arc<EngineShared>,
    metrics: Arc<Metrics>,
    preemptions_seen: u64,
    /// Prefix-cache counts already added to the metrics (the scheduler's totals restart
    /// when it does).
    prefix_seen: PrefixCacheStats,
    steps: tokio::sync::broadcast::Sender<StepRecord>,
}

impl Engine {
    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Times a few representative steps so the latency target is right from the first request
    /// instead of after the cost model has learned from live traffic.
    fn calibrate(&mut self) {
        let bs = self.sched_cfg.block_size;
        let blocks_needed = 256usize.div_ceil(bs) * 8;
        if self.sched_cfg.num_blocks < blocks_needed {
            return;
        }
        let vocab = self.model.config().vocab_size as u32;
        let tok = |i: usize| (1000 + i as u32 * 7919) % vocab.max(1);
        let tables: Vec<Vec<u32>> = (0..8)
            .map(|s| {
                (0..(256 / bs) as u32)
                    .map(|b| s * (256 / bs) as u32 + b)
                    .collect()
            })
            .collect();
        let prompt: Vec<u32> = (0..256).map(tok).collect();
        let t0 = Instant::now();
        for (len, decoders) in [
            (64usize, 0usize),
            (128, 0),
            (0, 1),
            (0, 4),
            (0, 8),
            (32, 4),
            (128, 4),
        ] {
            let mut entries = Vec::new();
            let mut f = StepFeatures::default();
            for (d, table) in tables.iter().enumerate().take(decoders) {
                entries.push(BatchEntry {
                    tokens: &prompt[d..d + 1],
                    start: 64,
                    block_table: table,
                    sample: true,
                });
                f.add_chunk(64, 1, true);
            }
            if len > 0 {
                entries.push(BatchEntry {
                    tokens: &prompt[..len],
                    start: 0,
                    block_table: &tables[7],
                    sample: true,
                });
                f.add_chunk(0, len, false);
            }
            let t = Instant::now();
            if self
                .model
                .model
                .forward(&entries, &mut self.kv, &mut self.ws)
                .is_err()
            {
                return;
            }
            self.cost.observe(f, t.elapsed().as_secs_f64());
        }
        tracing::info!(secs = t0.elapsed().as_secs_f64(), coefficients = ?self.cost.coefficients(), "cost model calibrated");
        self.sched = Scheduler::with_cost_model(self.sched_cfg.clone(), self.cost.clone());
    }

    fn run(&mut self, rx: mpsc::Receiver<EngineRequest>) {
        loop {
            if self.active.is_empty() {
                match rx.recv() {
                    Ok(req) => self.admit(req),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(req) => self.admit(req),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) if self.active.is_empty() => return,
                    Err(mpsc::TryRecvError::Disconnected) => break,
                }
            }
            self.drop_cancelled();
            let stepped = std::panic::catch_unwind(AssertUnwindSafe(|| {
                let plan = self.sched.plan(self.now());
                if !plan.is_empty() {
                    self.step(&plan);
                }
                !plan.is_empty()
            }));
            match stepped {
                Ok(true) => {}
                Ok(false) if !self.active.is_empty() => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(false) => {}
                Err(panic) => self.fail_all(&format!("engine panic: {}", panic_message(&*panic))),
            }
            self.publish();
        }
    }

    fn admit(&mut self, req: EngineRequest) {
        let arrival_secs = req
            .arrival
            .saturating_duration_since(self.epoch)
            .as_secs_f64();
        let prompt_tokens = req.prompt.len();
        let sampler = Sampler::new(req.params, &req.prompt);
        if let Err(e) = self
            .sched
            .add(req.id, req.prompt, req.max_tokens, arrival_secs)
        {
            self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
            let _ = req.events.send(EngineEvent::Failed(e.to_string()));
            return;
        }
        self.metrics
            .prompt_tokens_total
            .inc_by(prompt_tokens as u64);
        self.active.insert(
            req.id,
            Active {
                events: req.events,
                sampler,
                stop_token_ids: req.stop_token_ids,
                max_tokens: req.max_tokens,
                prompt_tokens,
                arrival: req.arrival,
                waiting: true,
                first_token: None,
                last_token: None,
                generated: 0,
                id_for_log: req.id,
                queue_secs: None,
            },
        );
    }

    fn drop_cancelled(&mut self) {
        let gone: Vec<u64> = self
            .active
            .iter()
            .filter(|(_, a)| a.events.is_closed())
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.sched.abort(id);
            if let Some(a) = self.active.remove(&id) {
                self.release_waiting(&a);
                tracing::debug!(
                    id = a.id_for_log,
                    prompt_tokens = a.prompt_tokens,
                    completion_tokens = a.generated,
                    "sequence of a departed client freed"
                );
            }
        }
    }

    fn release_waiting(&self, a: &Active) {
        if a.waiting {
            self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn step(&mut self, plan: &StepPlan) {
        let started = Instant::now();
        for c in &plan.chunks {
            if let Some(a) = self.active.get_mut(&c.seq) {
                if a.waiting {
                    a.waiting = false;
                    self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
                    let q = started.saturating_duration_since(a.arrival).as_secs_f64();
                    a.queue_secs = Some(q);
                    self.metrics.request_queue_time.observe(q);
                }
            }
        }
        let sampled = match self.forward_and_sample(plan) {
            Ok(s) => s,
            Err(e) => return self.fail_all(&format!("model error: {e}")),
        };
        let ids: Vec<(u64, u32)> = sampled.iter().map(|(id, s)| (*id, s.token)).collect();
        self.sched.commit(plan, &ids);
        let secs = started.elapsed().as_secs_f64();
        self.sched.observe_step(StepFeatures::of(plan), secs);
        self.metrics.step_duration.observe(secs);
        self.metrics
            .iteration_tokens
            .observe(plan.num_tokens() as f64);
        let preemptions = self.sched.num_preemptions();
        self.metrics
            .num_preemptions_total
            .inc_by(preemptions - self.preemptions_seen);
        self.preemptions_seen = preemptions;
        let prefix = self.sched.prefix_cache_stats();
        self.metrics
            .prefix_cache_queries_total
            .inc_by(prefix.queries - self.prefix_seen.queries);
        self.metrics
            .prefix_cache_hits_total
            .inc_by(prefix.hits - self.prefix_seen.hits);
        self.prefix_seen = prefix;

        let now = Instant::now();
        let mut itl_ms = Vec::new();
        for (id, s) in sampled {
            let Some(a) = self.active.get_mut(&id) else {
                continue;
            };
            let reason = if a.stop_token_ids.contains(&s.token) {
                Some(FinishReason::Stop)
            } else {
                if let Some(last) = a.last_token {
                    let gap = now.duration_since(last).as_secs_f64();
                    self.metrics.inter_token_latency.observe(gap);
                    itl_ms.push(gap * 1e3);
                } else {
                    a.first_token = Some(now);
                    self.metrics
                        .time_to_first_token
                        .observe(now.duration_since(a.arrival).as_secs_f64());
                }
                a.last_token = Some(now);
                a.generated += 1;
                self.metrics.generation_tokens_total.inc();
                if a.events.send(EngineEvent::Token(s)).is_err() {
                    continue; // dropped before the next step
                }
                (a.generated >= a.max_tokens).then_some(FinishReason::Length)
            };
            if let Some(reason) = reason {
                self.finish(id, reason);
            }
        }
        if self.steps.receiver_count() > 0 {
            let _ = self.steps.send(StepRecord {
                t: self.now(),
                prefill_tokens: plan.num_prefill_tokens(),
                decode_tokens: plan.num_decodes(),
                duration_ms: secs * 1e3,
                predicted_ms: plan.predicted_secs.map(|p| p * 1e3),
                target_ms: self.sched_cfg.itl_target.map(|t| t.as_secs_f64() * 1e3),
                running: self.sched.num_running(),
                waiting: self.shared.waiting.load(Ordering::Acquire),
                kv_usage: self.sched.kv_usage(),
                preempted: plan.preempted.len(),
                itl_ms,
            });
        }
    }

    fn forward_and_sample(
        &mut self,
        plan: &StepPlan,
    ) -> braid_model::Result<Vec<(u64, braid_model::Sampled)>> {
        let mut entries = Vec::with_capacity(plan.chunks.len());
        for c in &plan.chunks {
            let seq = self.sched.sequence(c.seq).expect("planned sequence exists");
            entries.push(BatchEntry {
                tokens: &seq.tokens[c.range()],
                start: c.start,
                block_table: &seq.block_table,
                sample: c.sample,
            });
        }
        let logits = self
            .model
            .model
            .forward(&entries, &mut self.kv, &mut self.ws)?;
        let vocab = self.model.config().vocab_size;
        let mut out = Vec::with_capacity(plan.num_samples());
        for (row, c) in plan.chunks.iter().filter(|c| c.sample).enumerate() {
            let a = self
                .active
                .get_mut(&c.seq)
                .expect("planned sequence is active");
            out.push((
                c.seq,
                a.sampler.sample(&logits[row * vocab..(row + 1) * vocab]),
            ));
        }
        Ok(out)
    }

    fn finish(&mut self, id: u64, reason: FinishReason) {
        let cached_tokens = self.sched.sequence(id).map_or(0, |s| s.cached_tokens);
        self.sched.finish(id);
        // Before the client hears "done", so a client that then reads the gauges sees it gone.
        self.publish();
        let Some(a) = self.active.remove(&id) else {
            return;
        };
        self.release_waiting(&a);
        let e2e = a.arrival.elapsed().as_secs_f64();
        self.metrics.e2e_request_latency.observe(e2e);
        self.metrics
            .request_prompt_tokens
            .observe(a.prompt_tokens as f64);
        self.metrics
            .request_generation_tokens
            .observe(a.generated as f64);
        self.metrics
            .request_success_total
            .with_label_values(&[reason.as_str()])
            .inc();
        tracing::debug!(
            id = a.id_for_log,
            prompt_tokens = a.prompt_tokens,
            cached_tokens,
            completion_tokens = a.generated,
            queue_ms = a.queue_secs.map(|q| (q * 1e3).round()),
            ttft_ms = a
                .first_token
                .map(|t| (t.duration_since(a.arrival).as_secs_f64() * 1e3).round()),
            e2e_ms = (e2e * 1e3).round(),
            finish_reason = reason.as_str(),
            "request finished"
        );
        let _ = a.events.send(EngineEvent::Done(Finished {
            reason,
            prompt_tokens: a.prompt_tokens,
            completion_tokens: a.generated,
            queue_secs: a.queue_secs,
        }));
    }

    fn fail_all(&mut self, message: &str) {
        tracing::error!(
            requests = self.active.len(),
            "{message}; failing every request in flight and starting afresh"
        );
        self.sched =
            Scheduler::with_cost_model(self.sched_cfg.clone(), self.sched.cost_model().clone());
        self.preemptions_seen = 0;
        self.prefix_seen = PrefixCacheStats::default();
        self.ws = Workspace::default();
        self.publish();
        for (_, a) in self.active.drain() {
            if a.waiting {
                self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
            }
            let _ = a.events.send(EngineEvent::Failed(message.to_string()));
        }
    }

    fn publish(&self) {
        let running = self.sched.num_running();
        self.shared.running.store(running, Ordering::Release);
        self.shared
            .kv_usage_ppm
            .store((self.sched.kv_usage() * 1e6) as u64, Ordering::Release);
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic")
}
