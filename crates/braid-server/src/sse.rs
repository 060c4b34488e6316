//! Server-sent events for `stream: true`: `data: {json}` per chunk, an error event if the
//! engine fails mid-stream, the usage chunk when `stream_options.include_usage`, then
//! `data: [DONE]`. Comment pings keep idle proxies from closing a long prompt's stream. A request
//! with several choices (`n`, a prompt array) interleaves their chunks as they come; an engine
//! failure in any of them ends the whole stream, and the rest are cancelled.
//!
//! The endpoints differ only in the JSON of each event, which `StreamFormat` supplies, and
//! Anthropic's Messages stream in its framing too: named events, several per chunk, its own
//! error event, and no `[DONE]`.

use crate::error::ApiError;
use crate::generation::{Chunk, Generation};
use crate::metrics::Metrics;
use crate::openai_types::Usage;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{BoxStream, SelectAll};
use futures::StreamExt;
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

pub trait StreamFormat: Send + 'static {
    type Json: Serialize;
    /// An event before any token (chat: the deltas that carry the role, one per choice).
    fn opening(&mut self, _choices: usize) -> Option<Self::Json> {
        None
    }
    /// Choice `index`'s next chunk; None when it has nothing to tell the client yet (chat
    /// holding back what may be the start of a tool call).
    fn chunk(&mut self, index: usize, chunk: Chunk) -> Option<Self::Json>;
    /// The final usage-only chunk (empty `choices`).
    fn usage(&mut self, usage: Usage) -> Self::Json;
    /// The SSE events of one item: one `data:` event of its JSON.
    fn events(item: &Self::Json) -> Vec<Event> {
        vec![json_event(item)]
    }
    /// The event for an engine failure mid-stream.
    fn error_event(error: &ApiError) -> Event {
        json_event(&error.body())
    }
    /// Whether `data: [DONE]` ends the stream (OpenAI's streams).
    const DONE: bool = true;
}

enum Phase {
    Opening,
    Tokens,
    Usage,
    Done,
    End,
}

/// A choice's next chunk, with the choice's usage once it has ended.
type ChoiceItem = (usize, Result<(Chunk, Option<Usage>), String>);

struct StreamState<F> {
    choices: SelectAll<BoxStream<'static, ChoiceItem>>,
    num_choices: usize,
    /// Usage of the choices that have ended, by index.
    ended: Vec<Option<Usage>>,
    /// Choices per prompt, for summing usage.
    n: usize,
    format: F,
    phase: Phase,
    include_usage: bool,
    metrics: Arc<Metrics>,
    /// Events of an item not sent yet (a format may make several of one item).
    pending: std::collections::VecDeque<Event>,
}

pub(crate) fn json_event(value: &impl Serialize) -> Event {
    Event::default().json_data(value).unwrap_or_else(|e| {
        Event::default().data(format!(
            "{{\"error\":{{\"message\":\"serialization failed: {e}\"}}}}"
        ))
    })
}

/// Choice `index`'s chunks as a stream that ends after its last one.
fn choice_stream(index: usize, generation: Generation) -> BoxStream<'static, ChoiceItem> {
    futures::stream::unfold(Some(generation), move |g| async move {
        let mut g = g?;
        let item = match g.next().await? {
            Ok(chunk) if chunk.finish.is_some() => {
                let usage = g.usage();
                return Some(((index, Ok((chunk, Some(usage)))), None));
            }
            Ok(chunk) => Ok((chunk, None)),
            Err(message) => return Some(((index, Err(message)), None)),
        };
        Some(((index, item), Some(g)))
    })
    .boxed()
}

/// Streams every choice of a request as its chunks come, each event naming its choice's
/// `index`; the usage chunk and `[DONE]` follow the last choice's end.
pub fn sse_response<F: StreamFormat>(
    generations: Vec<Generation>,
    n: usize,
    format: F,
    include_usage: bool,
    metrics: Arc<Metrics>,
) -> Response {
    let num_choices = generations.len();
    let state = StreamState {
        choices: futures::stream::select_all(
            generations
                .into_iter()
                .enumerate()
                .map(|(i, g)| choice_stream(i, g)),
        ),
        num_choices,
        ended: vec![None; num_choices],
        n,
        format,
        phase: Phase::Opening,
        include_usage,
        metrics,
        pending: Default::default(),
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        let event = loop {
            if let Some(event) = s.pending.pop_front() {
                break event;
            }
            match s.phase {
                Phase::Opening => {
                    s.phase = Phase::Tokens;
                    if let Some(json) = s.format.opening(s.num_choices) {
                        s.pending.extend(F::events(&json));
                    }
                }
                Phase::Tokens => match s.choices.next().await {
                    Some((index, Ok((chunk, usage)))) => {
                        if let Some(usage) = usage {
                            s.ended[index] = Some(usage);
                            if s.ended.iter().all(Option::is_some) {
                                s.phase = if s.include_usage {
                                    Phase::Usage
                                } else {
                                    Phase::Done
                                };
                            }
                        }
                        if let Some(json) = s.format.chunk(index, chunk) {
                            s.pending.extend(F::events(&json));
                        }
                    }
                    Some((_, Err(message))) => {
                        s.metrics
                            .request_errors_total
                            .with_label_values(&["500"])
                            .inc();
                        s.phase = Phase::Done;
                        break F::error_event(&ApiError::internal(format!(
                            "generation failed: {message}"
                        )));
                    }
                    None => s.phase = Phase::Done,
                },
                Phase::Usage => {
                    s.phase = Phase::Done;
                    let usage = Usage::of_choices(s.ended.iter().flatten().cloned(), s.n);
                    let json = s.format.usage(usage);
                    s.pending.extend(F::events(&json));
                }
                Phase::Done => {
                    s.phase = Phase::End;
                    if F::DONE {
                        break Event::default().data("[DONE]");
                    }
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
