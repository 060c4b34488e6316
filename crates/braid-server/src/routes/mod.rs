//! The HTTP routes, one file per endpoint family. Handlers stay thin: validation lives in
//! `validation.rs`, the request's life in `generation.rs`, the SSE framing in `sse.rs`.

pub mod chat;
pub mod completions;
pub mod dashboard;
pub mod fallback;
pub mod health;
pub mod metrics_route;
pub mod models;
pub mod tokenize;
pub mod tokenizer_info;

use crate::error::ApiError;
use crate::generation::Generation;
use crate::state::AppState;
use crate::validation::{Limits, ValidatedRequest, ValidationError};
use braid_model::LoadedModel;
use std::sync::Arc;
use std::time::Instant;

/// Runs CPU work of a request (tokenizing a long prompt, rendering a template) off the async
/// workers, so one large prompt does not stall every other connection's I/O; at most
/// `state.prep`'s permits at once (see `state.rs` for why so few).
pub(crate) async fn blocking<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    let slot = state
        .prep
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| ApiError::internal(format!("request processing failed: {e}")))?;
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        f()
    })
    .await
    .map_err(|e| ApiError::internal(format!("request processing failed: {e}")))
}

/// A generation request that passed validation and is queued, with what its response needs.
pub(crate) struct Admitted {
    pub generation: Generation,
    pub model: Arc<LoadedModel>,
    pub stream: bool,
    pub include_usage: bool,
    pub logprobs: bool,
}

/// What both generation endpoints do first: validate the body (off the async workers) and
/// hand it to the engine.
pub(crate) async fn admit<R: Send + 'static>(
    state: &AppState,
    req: R,
    validate: fn(&R, &LoadedModel, &Limits) -> Result<ValidatedRequest, ValidationError>,
    endpoint: &'static str,
) -> Result<Admitted, ApiError> {
    let arrival = Instant::now();
    let ready = state.ready()?;
    let (model, limits) = (ready.model.clone(), ready.limits.clone());
    let valid = blocking(state, move || validate(&req, &model, &limits)).await??;
    let (stream, include_usage, logprobs) =
        (valid.stream, valid.include_usage, valid.logprobs.is_some());
    Ok(Admitted {
        generation: Generation::start(state, ready, valid, arrival, endpoint)?,
        model: ready.model.clone(),
        stream,
        include_usage,
        logprobs,
    })
}
