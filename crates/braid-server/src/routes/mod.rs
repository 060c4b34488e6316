//! The HTTP routes, one file per endpoint family. Handlers stay thin: validation lives in
//! `validation.rs`, the request's life in `generation.rs`, the SSE framing in `sse.rs`.

pub mod chat;
pub mod completions;
pub mod dashboard;
pub mod embeddings;
pub mod fallback;
pub mod health;
pub mod messages;
pub mod metrics_route;
pub mod models;
pub mod render;
pub mod responses;
pub mod tokenize;
pub mod tokenizer_info;
pub mod worker;

use crate::error::{ApiError, ValidationError};
use crate::generation::{Collected, Generation};
use crate::openai_types::Usage;
use crate::request_origin::RequestOrigin;
use crate::sse::{sse_response, StreamFormat};
use crate::state::{AppState, Ready};
use crate::tools::CallReading;
use crate::validation::{Limits, ValidatedRequest};
use braid_model::LoadedModel;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Runs CPU work of a request (tokenizing a long prompt, rendering a template) off the async
/// workers, so one large prompt does not stall every other connection's I/O; at most
/// `state.prep`'s permits at once (see `state.rs` for why so few).
///
/// A request waits at most `--prep-wait-secs` for a slot, then gets a 429 instead of waiting
/// behind a flood; and work whose client left while it waited (the handler's future dropped)
/// is not started. Work once started runs to its end: a body is at most `--max-body-bytes`,
/// and the costliest one (a megabyte of prompt text to tokenize) takes about half a second.
pub(crate) async fn blocking<T: Send + 'static>(
    state: &AppState,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    let wait = state.prep_wait;
    let slot = tokio::time::timeout(wait, state.prep.clone().acquire_owned())
        .await
        .map_err(|_| {
            ApiError::overloaded(format!(
                "every request-preparation slot has been busy for {wait:?} (--prep-wait-secs); retry shortly"
            ))
        })?
        .map_err(|e| ApiError::internal(format!("request processing failed: {e}")))?;
    let left = Departure::default();
    let gone = left.0.clone();
    let work = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        (!gone.load(Ordering::Acquire)).then(f)
    });
    let done = work
        .await
        .map_err(|e| ApiError::internal(format!("request processing failed: {e}")))?;
    drop(left);
    // Skipped only once this future was dropped, when nobody reads the result.
    done.ok_or_else(|| ApiError::internal("request processing was skipped".to_string()))
}

/// Set when the handler's future is dropped before its blocking work finished: the client
/// left, and work not yet started is skipped.
#[derive(Default)]
struct Departure(Arc<AtomicBool>);

impl Drop for Departure {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A generation request that passed validation and is queued (one generation per choice, in
/// choice order), with what its response needs.
pub(crate) struct Admitted {
    pub generations: Vec<Generation>,
    /// Choices per prompt.
    pub n: usize,
    pub model: Arc<LoadedModel>,
    pub stream: bool,
    pub include_usage: bool,
    pub logprobs: bool,
    /// Chat with tools: how the answers are read for calls.
    pub tools: Option<CallReading>,
    /// Chat with a model that reasons: where its reasoning is, and whether it starts open.
    pub reasoning: Option<(braid_text::reasoning::ReasoningSyntax, bool)>,
    /// vLLM's `prompt_logprobs`: alternatives per prompt token.
    pub prompt_logprobs: Option<usize>,
    /// Completions with `echo`: the prompt's scores belong in the legacy `logprobs` too.
    pub echo: bool,
}

/// A request's answer: its stream, or every choice run to its end (in choice order) with the
/// request's usage and the format back, for the endpoint to shape.
pub(crate) enum Answer<F> {
    Stream(axum::response::Response),
    Whole(Vec<Collected>, Usage, F),
}

impl Admitted {
    pub async fn answer<F: StreamFormat>(
        self,
        state: &AppState,
        format: F,
    ) -> Result<Answer<F>, ApiError> {
        if self.stream {
            let metrics = state.metrics.clone();
            let response = sse_response(
                self.generations,
                self.n,
                format,
                self.include_usage,
                metrics,
            );
            return Ok(Answer::Stream(response));
        }
        let choices =
            futures::future::try_join_all(self.generations.into_iter().map(Generation::collect))
                .await?;
        let usage = Usage::of_choices(choices.iter().map(|c| c.usage), self.n);
        Ok(Answer::Whole(choices, usage, format))
    }
}

/// The validation a generation endpoint runs, for the model being served.
pub(crate) type Validate<R> =
    fn(&R, &LoadedModel, &Limits) -> Result<ValidatedRequest, ValidationError>;

/// A generation body validated (off the async workers) against the served model, with it:
/// what the generation endpoints and their render endpoints both start from.
pub(crate) async fn validated<R: Send + 'static>(
    state: &AppState,
    req: R,
    validate: Validate<R>,
) -> Result<(ValidatedRequest, &Ready), ApiError> {
    let ready = state.ready()?;
    let (model, limits) = (ready.generator()?.clone(), ready.limits.clone());
    let valid = blocking(state, move || validate(&req, &model, &limits)).await??;
    Ok((valid, ready))
}

/// What both generation endpoints do first: validate the body and hand it to the engine.
pub(crate) async fn admit<R: Send + 'static>(
    state: &AppState,
    req: R,
    validate: Validate<R>,
    origin: &RequestOrigin,
) -> Result<Admitted, ApiError> {
    let arrival = Instant::now();
    let (valid, ready) = validated(state, req, validate).await?;
    let (stream, include_usage, logprobs, n) = (
        valid.stream,
        valid.include_usage,
        valid.logprobs.is_some(),
        valid.n,
    );
    let tools = valid.tools.clone();
    let reasoning = valid.reasoning;
    let (prompt_logprobs, echo) = (valid.prompt_logprobs, valid.echo.is_some());
    // A refused choice drops the ones already queued, which cancels them. A prompt's first
    // choice reads it; its other choices share those KV blocks.
    let mut generations: Vec<Generation> = Vec::new();
    for (i, choice) in valid.choices().into_iter().enumerate() {
        let first_of_prompt = (i % n != 0).then(|| generations[i - i % n].id);
        let first_of_request = generations.first().map(|g| g.id);
        generations.push(Generation::start(
            state,
            ready,
            choice,
            arrival,
            origin,
            first_of_prompt,
            first_of_request,
        )?);
    }
    Ok(Admitted {
        generations,
        n,
        model: ready.generator()?.clone(),
        stream,
        include_usage,
        logprobs,
        tools,
        reasoning,
        prompt_logprobs,
        echo,
    })
}
