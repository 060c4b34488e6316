//! The cap on open client connections (`--max-connections`).
//!
//! Every served connection holds a permit while it is open, idle keep-alive ones included.
//! When all are taken, a new connection is still accepted and answered, quickly, with 503,
//! `Retry-After: 1` and `Connection: close` in OpenAI's error JSON, so the client learns why
//! instead of hanging in the kernel's accept queue. Those answers hold permits of their own
//! (as many again) and a short header timeout; past both, a new connection is closed at once
//! without an answer, so a flood cannot make the server hold unbounded sockets or memory.
//!
//! With `--max-connections-per-ip`, one client address may hold at most that many of the
//! places, so a single misbehaving client cannot take them all; its extra connections are
//! refused the same way.

use crate::error::ApiError;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    per_ip: Option<usize>,
    by_ip: Arc<ConnectionsByIp>,
}

/// Open connections per client address (only with `--max-connections-per-ip`).
type ConnectionsByIp = Mutex<HashMap<IpAddr, usize>>;

/// What to do with a newly accepted connection.
pub enum Admission {
    /// Serve it; its place is held until it closes.
    Serve(Place),
    /// Answer 503 with this message and close it.
    Refuse(OwnedSemaphorePermit, String),
    /// Close it at once.
    Close,
}

/// A served connection's place: the cap's permit and its address's count.
pub struct Place {
    _permit: OwnedSemaphorePermit,
    ip: Option<(IpAddr, Arc<ConnectionsByIp>)>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some((ip, by_ip)) = &self.ip {
            uncount(by_ip, *ip);
        }
    }
}

fn uncount(by_ip: &ConnectionsByIp, ip: IpAddr) {
    let mut counts = by_ip.lock().expect("connection counts");
    if let Some(n) = counts.get_mut(&ip) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&ip);
        }
    }
}

impl ConnectionLimit {
    pub fn new(max: usize, per_ip: Option<usize>) -> Self {
        Self {
            max,
            open: Arc::new(Semaphore::new(max)),
            refusing: Arc::new(Semaphore::new(max)),
            refused: AtomicU64::new(0),
            per_ip,
            by_ip: Arc::default(),
        }
    }

    /// Counts a connection from `ip` against `--max-connections-per-ip`: `Ok(true)` counted,
    /// `Ok(false)` no such limit, `Err` the refusal when `ip` is at it.
    fn count(&self, ip: IpAddr) -> Result<bool, String> {
        let Some(per_ip) = self.per_ip else {
            return Ok(false);
        };
        let mut counts = self.by_ip.lock().expect("connection counts");
        let n = counts.entry(ip).or_default();
        if *n >= per_ip {
            return Err(format!(
                "this client address has {per_ip} connections open (--max-connections-per-ip); close one or retry shortly"
            ));
        }
        *n += 1;
        Ok(true)
    }

    /// The cap (`--max-connections`).
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections being served now.
    pub fn open(&self) -> usize {
        self.max - self.open.available_permits()
    }

    /// A connection from `ip`.
    pub fn admit(&self, ip: IpAddr) -> Admission {
        let refusal = match self.count(ip) {
            Err(message) => message,
            Ok(counted) => match self.open.clone().try_acquire_owned() {
                Ok(permit) => {
                    return Admission::Serve(Place {
                        _permit: permit,
                        ip: counted.then(|| (ip, self.by_ip.clone())),
                    })
                }
                Err(_) => {
                    if counted {
                        uncount(&self.by_ip, ip);
                    }
                    format!(
                        "the server has {} connections open (--max-connections); retry shortly",
                        self.max
                    )
                }
            },
        };
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        // Warn on the 1st, 10th, 100th, ... refusal: visible, but not one line per connection.
        if matches!(n, 1 | 10 | 100 | 1000) || n.is_multiple_of(10_000) {
            tracing::warn!(
                refused_so_far = n,
                "refusing new connections with 503: {refusal}"
            );
        }
        match self.refusing.clone().try_acquire_owned() {
            Ok(p) => Admission::Refuse(p, refusal),
            Err(_) => Admission::Close,
        }
    }
}

fn refusal(message: String) -> Response {
    let mut err = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
        message,
    )
    .with_code("too_many_connections");
    err.retry_after = Some(1);
    err.into_response()
}

/// Reads the request (bounded in time and size), answers 503 with `message` and closes the
/// connection.
pub async fn refuse(tcp: TcpStream, permit: OwnedSemaphorePermit, message: String) {
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let message = message.clone();
        async move {
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
            Ok::<_, Infallible>(refusal(message))
        }
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
        let limit = ConnectionLimit::new(2, None);
        let ip: IpAddr = [127, 0, 0, 1].into();
        let a = limit.admit(ip);
        let b = limit.admit(ip);
        assert!(matches!(a, Admission::Serve(_)) && matches!(b, Admission::Serve(_)));
        assert_eq!(limit.open(), 2);
        let r1 = limit.admit(ip);
        let r2 = limit.admit(ip);
        assert!(matches!(r1, Admission::Refuse(..)) && matches!(r2, Admission::Refuse(..)));
        assert!(matches!(limit.admit(ip), Admission::Close));
        drop(a);
        assert_eq!(limit.open(), 1);
        let c = limit.admit(ip);
        assert!(matches!(c, Admission::Serve(_)));
        drop(r1);
        assert!(matches!(limit.admit(ip), Admission::Refuse(..)));
        drop((b, c, r2));
        assert_eq!(limit.open(), 0);
        assert!(refusal(String::new()).headers().contains_key("retry-after"));
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let limit = ConnectionLimit::new(4, Some(2));
        let (a, b): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let first = [limit.admit(a), limit.admit(a)];
        assert!(first.iter().all(|x| matches!(x, Admission::Serve(_))));
        match limit.admit(a) {
            Admission::Refuse(_, message) => assert!(message.contains("--max-connections-per-ip")),
            _ => panic!("a third connection from one address"),
        }
        assert!(matches!(limit.admit(b), Admission::Serve(_)));
        drop(first);
        let again = limit.admit(a);
        assert!(matches!(again, Admission::Serve(_)));
        assert_eq!(limit.by_ip.lock().unwrap().get(&a), Some(&1));
        drop(again);
        assert_eq!(limit.by_ip.lock().unwrap().get(&a), None, "forgotten at 0");
    }
}
