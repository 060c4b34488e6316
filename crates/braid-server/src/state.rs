//! What every handler shares: the metrics (there from the start) and, once the model has
//! loaded, the model and the engine handle.
//!
//! The server listens before the model is loaded, so that /health can answer "loading"
//! instead of refusing connections; `ready` is a write-once cell that flips the server from
//! 503 to serving.

use crate::args::ServeArgs;
use crate::auth::Auth;
use crate::engine_handle::EngineHandle;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::validation::Limits;
use braid_model::LoadedModel;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The loaded model and its engine.
pub struct Ready {
    pub model: Arc<LoadedModel>,
    pub engine: EngineHandle,
    pub limits: Limits,
    /// When the model became ready (Unix seconds), for /v1/models' `created`.
    pub created: u64,
}

pub struct Shared {
    pub metrics: Arc<Metrics>,
    pub served_model_name: String,
    pub request_timeout: Duration,
    pub max_body_bytes: usize,
    /// Makes response ids unique across restarts: "cmpl-<prefix><request id>".
    pub id_prefix: String,
    /// The API keys and the routes they guard.
    pub auth: Arc<Auth>,
    /// Origins allowed to call from a browser (CORS); empty: CORS off.
    pub cors_origins: Vec<String>,
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
            request_timeout: Duration::from_secs(args.request_timeout_secs),
            max_body_bytes: args.max_body_bytes,
            id_prefix: format!("{:08x}", nanos ^ std::process::id().rotate_left(16)),
            auth: Arc::new(Auth::new(args.api_keys.clone(), args.protect_metrics)),
            cors_origins: args.cors_origins.clone(),
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
