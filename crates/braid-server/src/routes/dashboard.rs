//! GET /dashboard and GET /debug/steps: the lesson of braid as a picture. Every engine step is
//! streamed as it happens (SSE), and one self-contained page (no CDN; HTML, CSS and JS are in
//! the binary) draws it: long prompts become thin slices between decode steps.

use crate::error::ApiError;
use crate::state::{AppState, MAX_STEP_VIEWERS};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use futures::Stream;
use std::convert::Infallible;
use tokio::sync::broadcast::error::RecvError;

const PAGE: &str = include_str!("../dashboard.html");

pub async fn dashboard() -> impl IntoResponse {
    Html(PAGE)
}

pub async fn steps(
    State(state): State<AppState>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let ready = state.ready()?;
    let place = state
        .step_viewers
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::overloaded(format!(
                "/debug/steps already has {MAX_STEP_VIEWERS} viewers; close one or retry later"
            ))
        })?;
    let mut feed = ready.observer.subscribe_steps();
    let stream = async_stream(move |tx| async move {
        // Held until the viewer's connection goes (closed, or dropped for not reading).
        let _place = place;
        loop {
            match feed.recv().await {
                Ok(step) => {
                    let event = Event::default()
                        .json_data(&step)
                        .expect("step records serialize");
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                // A slow viewer skips steps; the engine never waits for it.
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// A stream fed by a task, so the broadcast receiver lives as long as the client does.
fn async_stream<F, Fut>(f: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<Event, Infallible>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
