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

use crate::error::ApiError;

/// Runs CPU work of a request (tokenizing a long prompt, rendering a template) off the async
/// workers, so one large prompt does not stall every other connection's I/O.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("request processing failed: {e}")))
}
