//! Server-sent events for `stream: true`: `data: {json}` per chunk, an error event if the
//! engine fails mid-stream, the usage chunk when `stream_options.include_usage`, then
//! `data: [DONE]`. Comment pings keep idle proxies from closing a long prompt's stream.
//!
//! The endpoints differ only in the JSON of each event, which `StreamFormat` supplies.

use crate::error::ApiError;
use crate::generation::{Chunk, Generation};
use crate::metrics::Metrics;
use crate::openai_types::Usage;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

pub trait StreamFormat: Send + 'static {
    type Json: Serialize;
    /// An event before any token (chat: the delta that carries the role).
    fn opening(&mut self) -> Option<Self::Json> {
        None
    }
    fn chunk(&mut self, chunk: Chunk) -> Self::Json;
    /// The final usage-only chunk (empty `choices`).
    fn usage(&mut self, usage: Usage) -> Self::Json;
}

enum Phase {
    Opening,
    Tokens,
    Usage,
    Done,
    End,
}

struct StreamState<F> {
    generation: Generation,
    format: F,
    phase: Phase,
    include_usage: bool,
    metrics: Arc<Metrics>,
}

fn json_event(value: &impl Serialize) -> Event {
    Event::default().json_data(value).unwrap_or_else(|e| {
        Event::default().data(format!(
            "{{\"error\":{{\"message\":\"serialization failed: {e}\"}}}}"
        ))
    })
}

pub fn sse_response<F: StreamFormat>(
    generation: Generation,
    format: F,
    include_usage: bool,
    metrics: Arc<Metrics>,
) -> Response {
    let state = StreamState {
        generation,
        format,
        phase: Phase::Opening,
        include_usage,
        metrics,
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        let event = loop {
            match s.phase {
                Phase::Opening => {
                    s.phase = Phase::Tokens;
                    if let Some(json) = s.format.opening() {
                        break json_event(&json);
                    }
                }
                Phase::Tokens => match s.generation.next().await {
                    Some(Ok(chunk)) => {
                        if chunk.finish.is_some() {
                            s.phase = if s.include_usage {
                                Phase::Usage
                            } else {
                                Phase::Done
                            };
                        }
                        break json_event(&s.format.chunk(chunk));
                    }
                    Some(Err(message)) => {
                        s.metrics
                            .request_errors_total
                            .with_label_values(&["500"])
                            .inc();
                        s.phase = Phase::Done;
                        break json_event(
                            &ApiError::internal(format!("generation failed: {message}")).body(),
                        );
                    }
                    None => s.phase = Phase::Done,
                },
                Phase::Usage => {
                    s.phase = Phase::Done;
                    let usage = s.generation.usage();
                    break json_event(&s.format.usage(usage));
                }
                Phase::Done => {
                    s.phase = Phase::End;
                    break Event::default().data("[DONE]");
                }
                Phase::End => return None,
            }
        };
        Some((Ok::<_, Infallible>(event), s))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
