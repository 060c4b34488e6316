//! What every handler shares: the metrics (there from the start) and, once the model has
//! loaded, the model and the engine handle.
//!
//! The server listens before the model is loaded, so that /health can answer "loading"
//! instead of refusing connections; `ready` is a write-once cell that flips the server from
//! 503 to serving.
//!
//! Request preparation (tokenizing, rendering a chat template) is CPU work and runs off the
//! async workers, but on a few threads only (`PREP_THREADS`): tokio's blocking pool would
//! grow to 512 threads under a burst of long prompts, all competing with the compute threads
//! that decode for everybody. A long prompt waits for a free preparation slot instead.

use crate::args::ServeArgs;
use crate::auth::Auth;
use crate::engine_observer::MetricsObserver;
use crate::error::{ApiError, ValidationError};
use crate::kv_events::KvEventPublisher;
use crate::metrics::Metrics;
use crate::openai_types::unix_now;
use crate::request_traces::RequestTraces;
use crate::response_store::ResponseStore;
use crate::validation::Limits;
use braid_engine::{spawn_engine, EngineConfig, EngineHandle, Pooling, SentenceEmbedder};
use braid_model::LoadedModel;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Requests prepared (tokenized, templated) at once. Two keeps a long prompt from holding up
/// a short one; more would only take cores from the compute threads.
const PREP_THREADS: usize = 2;

/// `/debug/steps` streams open at once: each is a connection held for as long as its viewer
/// watches, so without a bound they could take every connection place.
pub const MAX_STEP_VIEWERS: usize = 16;

/// The loaded models and their engine.
pub struct Ready {
    /// The generation model; None on a server that only embeds.
    pub(crate) model: Option<Arc<LoadedModel>>,
    /// The embedding model served beside (`--embedding-model`), whose texts share the steps.
    pub embedder: Option<Arc<SentenceEmbedder>>,
    /// The generation model also embeds, its hidden states pooled so (`--pooling`).
    pub pooling: Option<Pooling>,
    pub engine: EngineHandle,
    /// The engine's reports as metrics, and the live step feed.
    pub observer: Arc<MetricsObserver>,
    pub limits: Limits,
    /// When the model became ready (Unix seconds), for /v1/models' `created`.
    pub created: u64,
    /// Where the prefix cache's events go (`--kv-events`).
    pub kv_events: Option<Arc<KvEventPublisher>>,
}

impl Ready {
    /// The generation model, or the 400 a generation request gets from a server that only
    /// embeds.
    pub fn generator(&self) -> Result<&Arc<LoadedModel>, ApiError> {
        self.model.as_ref().ok_or_else(|| {
            ValidationError::WrongModelKind {
                requested: self.limits.served_model_name.clone(),
                cannot: "is an embedding model and does not generate text",
                serving: "none (this server was started with --embedding-model alone)".into(),
            }
            .into()
        })
    }

    /// Starts the engine on `model`, its reports going to `metrics` and its prefix cache's
    /// events to `kv_events`.
    pub fn start(
        model: Option<Arc<LoadedModel>>,
        embedder: Option<Arc<SentenceEmbedder>>,
        cfg: EngineConfig,
        metrics: Arc<Metrics>,
        limits: Limits,
        kv_events: Option<Arc<KvEventPublisher>>,
    ) -> anyhow::Result<Self> {
        let observer = MetricsObserver::new(metrics, kv_events.clone());
        let pooling = cfg.pooling;
        let engine = spawn_engine(model.clone(), embedder.clone(), cfg, observer.clone())?;
        Ok(Self {
            model,
            embedder,
            pooling,
            engine,
            observer,
            limits,
            created: unix_now(),
            kv_events,
        })
    }
}

pub struct Shared {
    pub metrics: Arc<Metrics>,
    pub served_model_name: String,
    /// The embedding model's id (`--embedding-model`'s directory name).
    pub embedding_model_name: Option<String>,
    pub request_timeout: Duration,
    /// A step running longer is a stalled engine (`/health`).
    pub step_stall_limit: Duration,
    pub max_body_bytes: usize,
    /// Makes response ids unique across restarts: "cmpl-<prefix><request id>".
    pub id_prefix: String,
    /// The API keys and the routes they guard.
    pub auth: Arc<Auth>,
    /// Origins allowed to call from a browser (CORS); empty: CORS off.
    pub cors_origins: Vec<String>,
    /// Slots for request preparation off the async workers (see the module docs).
    pub prep: Arc<Semaphore>,
    /// Longest a request waits for one (`--prep-wait-secs`).
    pub prep_wait: Duration,
    /// Places for `/debug/steps` viewers, each an endless stream.
    pub step_viewers: Arc<Semaphore>,
    /// The Responses API's stored responses (`--response-store-mb`, `--response-store-secs`).
    pub responses: Arc<ResponseStore>,
    /// The request-trace exporter (`--otlp-traces-endpoint`), set once at start.
    pub traces: OnceLock<Arc<RequestTraces>>,
    ready: OnceLock<Ready>,
}

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(args: &ServeArgs, metrics: Arc<Metrics>) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Self(Arc::new(Shared {
            metrics,
            served_model_name: args.served_model_name(),
            embedding_model_name: args
                .embedding_model
                .as_ref()
                .and_then(|d| d.file_name())
                .map(|n| n.to_string_lossy().into_owned()),
            request_timeout: Duration::from_secs(args.request_timeout_secs),
            step_stall_limit: Duration::from_secs(args.step_stall_secs),
            max_body_bytes: args.max_body_bytes,
            id_prefix: format!("{:08x}", nanos ^ std::process::id().rotate_left(16)),
            auth: Arc::new(Auth::new(args.api_keys.clone(), args.protect_metrics)),
            cors_origins: args.cors_origins.clone(),
            prep: Arc::new(Semaphore::new(PREP_THREADS)),
            prep_wait: Duration::from_secs(args.prep_wait_secs),
            step_viewers: Arc::new(Semaphore::new(MAX_STEP_VIEWERS)),
            responses: Arc::new(ResponseStore::new(
                args.response_store_mb << 20,
                Duration::from_secs(args.response_store_secs),
            )),
            traces: OnceLock::new(),
            ready: OnceLock::new(),
        }))
    }

    /// Called once, when the model and engine are up.
    pub fn set_ready(&self, ready: Ready) {
        if self.0.ready.set(ready).is_err() {
            tracing::warn!("the server was marked ready twice; keeping the first model");
        }
    }

    /// The model and engine, or None while loading.
    pub fn get_ready(&self) -> Option<&Ready> {
        self.0.ready.get()
    }

    /// The model and engine for a request: 503 while loading or draining.
    pub fn ready(&self) -> Result<&Ready, ApiError> {
        let ready = self.get_ready().ok_or_else(ApiError::loading)?;
        if ready.engine.is_draining() {
            return Err(ApiError::draining());
        }
        Ok(ready)
    }

    /// A response id such as "chatcmpl-1a2b3c4d7".
    pub fn response_id(&self, kind: &str, request_id: u64) -> String {
        format!("{kind}-{}{request_id:x}", self.id_prefix)
    }
}
