//! The engine thread (being written): plan → forward → sample → send, in a loop.

use crate::engine_handle::EngineHandle;
use crate::metrics::Metrics;
use braid_model::LoadedModel;
use std::sync::Arc;
use std::time::Duration;

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
}

/// Starts the engine thread on `model` and returns the handle handlers submit to.
pub fn spawn_engine(model: Arc<LoadedModel>, cfg: EngineConfig, metrics: Arc<Metrics>) -> anyhow::Result<EngineHandle> {
    let _ = (model, cfg, metrics);
    todo!()
}
