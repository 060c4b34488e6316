//! The cap on open client connections (`--max-connections`).
//!
//! Every served connection holds a permit while it is open, idle keep-alive ones included.
//! When all are taken, a new connection is still accepted and answered, quickly, with 503,
//! `Retry-After: 1` and `Connection: close` in OpenAI's error JSON, so the client learns why
//! instead of hanging in the kernel's accept queue. Those answers hold permits of their own
//! (as many again) and a short header timeout; past both, a new connection is closed at once
//! without an answer, so a flood cannot make the server hold unbounded sockets or memory.

use crate::error::ApiError;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a refused connection gets to send its request before it is closed.
const REFUSAL_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this much of a refused request's body is read (and dropped) before answering, so
/// the client is reading, not writing, when the 503 arrives.
const REFUSAL_DRAIN_BYTES: usize = 1 << 20;

pub struct ConnectionLimit {
    max: usize,
    open: Arc<Semaphore>,
    refusing: Arc<Semaphore>,
    refused: AtomicU64,
}

/// What to do with a newly accepted connection.
pub enum Admission {
    /// Serve it; the permit is held until it closes.
    Serve(OwnedSemaphorePermit),
    /// Answer 503 and close it.
    Refuse(OwnedSemaphorePermit),
    /// Close it at once.
    Close,
}

impl ConnectionLimit {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            open: Arc::new(Semaphore::new(max)),
            refusing: Arc::new(Semaphore::new(max)),
            refused: AtomicU64::new(0),
        }
    }

    /// The cap (`--max-connections`).
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections being served now.
    pub fn open(&self) -> usize {
        self.max - self.open.available_permits()
    }

    pub fn admit(&self) -> Admission {
        if let Ok(p) = self.open.clone().try_acquire_owned() {
            return Admission::Serve(p);
        }
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        // Warn on the 1st, 10th, 100th, ... refusal: visible, but not one line per connection.
        if matches!(n, 1 | 10 | 100 | 1000) || n.is_multiple_of(10_000) {
            tracing::warn!(
                max = self.max,
                refused_so_far = n,
                "--max-connections reached: refusing new connections with 503"
            );
        }
        match self.refusing.clone().try_acquire_owned() {
            Ok(p) => Admission::Refuse(p),
            Err(_) => Admission::Close,
        }
    }
}

fn refusal(max: usize) -> Response {
    let mut err = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
        format!("the server has {max} connections open (--max-connections); retry shortly"),
    )
    .with_code("too_many_connections");
    err.retry_after = Some(1);
    err.into_response()
}

/// Reads the request (bounded in time and size), answers 503 and closes the connection.
pub async fn refuse(tcp: TcpStream, permit: OwnedSemaphorePermit, max: usize) {
    let service = hyper::service::service_fn(move |req: Request<Incoming>| async move {
        let mut body = req.into_body();
        let mut read = 0usize;
        let drain = async {
            while let Some(Ok(frame)) = body.frame().await {
                read += frame.data_ref().map_or(0, |d| d.len());
                if read > REFUSAL_DRAIN_BYTES {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(REFUSAL_READ_TIMEOUT, drain).await;
        Ok::<_, Infallible>(refusal(max))
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(REFUSAL_READ_TIMEOUT)
        .keep_alive(false);
    let conn = http.serve_connection(TokioIo::new(tcp), service);
    let _ = tokio::time::timeout(REFUSAL_READ_TIMEOUT * 3, conn).await;
    drop(permit);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_then_refuse_then_close() {
        let limit = ConnectionLimit::new(2);
        let a = limit.admit();
        let b = limit.admit();
        assert!(matches!(a, Admission::Serve(_)) && matches!(b, Admission::Serve(_)));
        assert_eq!(limit.open(), 2);
        let r1 = limit.admit();
        let r2 = limit.admit();
        assert!(matches!(r1, Admission::Refuse(_)) && matches!(r2, Admission::Refuse(_)));
        assert!(matches!(limit.admit(), Admission::Close));
        drop(a);
        assert_eq!(limit.open(), 1);
        let c = limit.admit();
        assert!(matches!(c, Admission::Serve(_)));
        drop(r1);
        assert!(matches!(limit.admit(), Admission::Refuse(_)));
        drop((b, c, r2));
        assert_eq!(limit.open(), 0);
        assert!(refusal(2).headers().contains_key("retry-after"));
    }
}
