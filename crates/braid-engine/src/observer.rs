//! What the engine reports, as plain values, and to whom.
//!
//! Like vLLM's scheduler returning stats with each step instead of leaving callers to
//! difference running totals, the engine hands each step's own numbers to an
//! [`EngineObserver`]: what ran, how long it took against the prediction, who finished and
//! why, who was preempted, prefix-cache lookups, KV usage, queue lengths. Per-request
//! milestones (queued, first scheduled, each token, preempted, finished) go to the same
//! observer. The server turns these into Prometheus metrics and the dashboard's step feed;
//! the engine knows neither.
//!
//! Every call happens on the engine thread, before the client concerned hears anything (so a
//! client that reads /metrics after its response sees itself counted), and must be quick:
//! update counters, push onto a channel, never block.

use braid_sched::{CacheEvent, FinishReason, PrefixCacheStats, SeqId};
use std::time::Duration;

/// The engine's fixed shape, reported once before it serves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineInfo {
    pub block_size: usize,
    pub num_blocks: usize,
    pub prefix_caching: bool,
    pub itl_target: Option<Duration>,
    /// How the KV cache stores keys and values (`f16`, `q8_0`).
    pub kv_cache_dtype: &'static str,
}

/// One engine step that ran.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStats {
    /// When the step ended, since the engine started.
    pub at: Duration,
    pub prefill_tokens: usize,
    pub decode_tokens: usize,
    pub duration: Duration,
    /// The cost model's prediction for it.
    pub predicted: Option<Duration>,
    /// What its prompt slices were sized to: the latency target times the share of it the
    /// cost model's error leaves (`None` without a target or decodes).
    pub planned_to: Option<Duration>,
    /// Requests whose last token this step sampled, and why they ended.
    pub finished: Vec<(SeqId, FinishReason)>,
    /// Requests preempted while planning it.
    pub preempted: Vec<SeqId>,
    /// Prefix-cache lookups made while planning it, in tokens.
    pub prefix_cache: PrefixCacheStats,
    /// Fraction of KV blocks in use after it.
    pub kv_usage: f64,
    pub running: usize,
    pub waiting: usize,
    /// For each token sent by this step that was not its stream's first: the gap since the
    /// stream's previous token.
    pub token_gaps: Vec<Duration>,
    /// Texts the embedding model ran in this step, and their tokens with padding.
    pub embed_texts: usize,
    pub embed_tokens: usize,
    /// Each draft the step verified: tokens drafted, and how many of them were accepted.
    pub drafts: Vec<(usize, usize)>,
}

impl StepStats {
    /// Drafted tokens the step verified.
    pub fn drafted_tokens(&self) -> usize {
        self.drafts.iter().map(|d| d.0).sum()
    }

    /// Drafted tokens the step accepted.
    pub fn accepted_tokens(&self) -> usize {
        self.drafts.iter().map(|d| d.1).sum()
    }
}

/// An embedding request answered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbeddingDone {
    pub texts: usize,
    pub prompt_tokens: usize,
    /// Arrival to its first text's step, and to its answer.
    pub queue: Duration,
    pub e2e: Duration,
}

/// A token's place in its stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TokenTiming {
    /// The first token: time since the request arrived (TTFT).
    First(Duration),
    /// A later token: time since the previous one (ITL).
    Next(Duration),
}

/// A milestone in one request's life.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestEvent {
    /// Accepted by the scheduler.
    Queued { prompt_tokens: usize },
    /// A chunk of it is in a step for the first time.
    Scheduled { queue_time: Duration },
    /// A generated token is about to be sent (stop tokens are not).
    Token(TokenTiming),
    /// It lost its KV blocks and will be recomputed.
    Preempted,
    /// It finished, by the scheduler's stop rule or by the server's `EngineHandle::finish`
    /// (reported once per request; a client that left never finished); `e2e` is arrival to
    /// now, `completion_tokens` the tokens its client was given.
    Finished {
        reason: FinishReason,
        prompt_tokens: usize,
        completion_tokens: usize,
        e2e: Duration,
    },
}

/// Receives the engine's reports; see the module docs for when and how.
pub trait EngineObserver: Send + Sync + 'static {
    /// Once, before the engine calibrates and serves.
    fn started(&self, info: &EngineInfo);
    /// After every step that ran, before any of its tokens is sent.
    fn step(&self, stats: &StepStats);
    /// A request's milestone, before the request hears of it.
    fn request(&self, id: SeqId, event: &RequestEvent);
    /// An embedding request is answered (right after its last text's step).
    fn embedded(&self, _done: &EmbeddingDone) {}
    /// Whether [`cache_events`](Self::cache_events) is wanted: the engine keeps the prefix
    /// cache's log only then.
    fn wants_cache_events(&self) -> bool {
        false
    }
    /// What the prefix cache stored and dropped, in order: `AllCleared` when the engine starts
    /// (and when it starts afresh after a failure), then after each step or flush that changed
    /// it.
    fn cache_events(&self, _events: &[CacheEvent]) {}
}
