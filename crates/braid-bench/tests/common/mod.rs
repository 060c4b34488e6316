//! A fake OpenAI-compatible server whose streams follow a script, so the benchmark's
//! clocks can be checked against delays we chose.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server does with the k-th completion request (k modulo the script length).
#[derive(Debug, Clone)]
pub enum Behavior {
    /// Streams `max_tokens` tokens: the first after `first_ms`, then every `gap_ms`,
    /// except that token `long_gap.0` comes `long_gap.1` ms after the one before it.
    Stream {
        first_ms: u64,
        gap_ms: u64,
        long_gap: Option<(usize, u64)>,
        /// Send `data: [DONE]` at the end (else just close the stream).
        done: bool,
    },
    /// Answers with this status and an OpenAI-style error body.
    Status(u16),
    /// Streams `max_tokens` tokens 1 ms apart, the first after `us_per_token` µs for each
    /// prompt token not in the prefix cache (all of them unless started with `caching`).
    Prefill { us_per_token: u64 },
}

impl Behavior {
    pub fn quick() -> Behavior {
        Behavior::Stream {
            first_ms: 5,
            gap_ms: 5,
            long_gap: None,
            done: true,
        }
    }
}

pub struct Fake {
    pub script: Vec<Behavior>,
    pub next: AtomicUsize,
    /// Body and `Authorization` header of every completion request received.
    pub received: Mutex<Vec<(Value, Option<String>)>>,
    /// A prefix cache of whole 16-token blocks, and braid's counters of it at /metrics
    /// (`None`: no cache, and /metrics answers 404).
    pub cache: Option<Mutex<Cache>>,
}

#[derive(Default)]
pub struct Cache {
    pub prompts: Vec<Vec<Value>>,
    pub hits: usize,
    pub queries: usize,
}

impl Cache {
    /// Looks a prompt up and keeps it; returns how many of its tokens were cached: its
    /// longest common prefix with an earlier prompt, in whole blocks, less its last token.
    fn admit(&mut self, prompt: &[Value]) -> usize {
        let common = |p: &Vec<Value>| p.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        let longest = self.prompts.iter().map(common).max().unwrap_or(0);
        let hit = longest.min(prompt.len().saturating_sub(1)) / 16 * 16;
        self.hits += hit;
        self.queries += prompt.len();
        self.prompts.push(prompt.to_vec());
        hit
    }
}

impl Fake {
    pub fn bodies(&self) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|(b, _)| b.clone())
            .collect()
    }
}

/// Starts the server on 127.0.0.1 at a free port; returns its base URL.
pub async fn start(script: Vec<Behavior>) -> (String, Arc<Fake>) {
    serve(script, None).await
}

/// Like [`start`], with a prefix cache of token-id prompts and braid's counters of it.
pub async fn start_caching(script: Vec<Behavior>) -> (String, Arc<Fake>) {
    serve(script, Some(Mutex::default())).await
}

async fn serve(script: Vec<Behavior>, cache: Option<Mutex<Cache>>) -> (String, Arc<Fake>) {
    let fake = Arc::new(Fake {
        script,
        next: AtomicUsize::new(0),
        received: Mutex::new(vec![]),
        cache,
    });
    let app = Router::new()
        .route(
            "/v1/models",
            get(|| async {
                Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))
            }),
        )
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(completions))
        .route("/metrics", get(metrics))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), fake)
}

async fn metrics(State(fake): State<Arc<Fake>>) -> Response {
    let Some(cache) = &fake.cache else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let c = cache.lock().unwrap();
    let text = format!(
        "# TYPE braid_prefix_cache_hits_total counter\nbraid_prefix_cache_hits_total {}\n\
         # TYPE braid_prefix_cache_queries_total counter\nbraid_prefix_cache_queries_total {}\n",
        c.hits, c.queries
    );
    text.into_response()
}

fn chunk(v: Value) -> String {
    format!("data: {v}\n\n")
}

async fn completions(
    State(fake): State<Arc<Fake>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);
    fake.received.lock().unwrap().push((body.clone(), auth));
    let empty = vec![];
    let prompt = body["prompt"].as_array().unwrap_or(&empty);
    let cached = match &fake.cache {
        Some(c) => c.lock().unwrap().admit(prompt),
        None => 0,
    };
    let k = fake.next.fetch_add(1, Ordering::SeqCst);
    let behavior = fake.script[k % fake.script.len()].clone();
    let (first_ms, gap_ms, long_gap, done) = match behavior {
        Behavior::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap();
            let err = json!({"error": {"message": "scripted failure", "type": "server_error", "param": null, "code": code}});
            return (status, Json(err)).into_response();
        }
        Behavior::Prefill { us_per_token } => {
            let first_ms = (prompt.len() - cached) as u64 * us_per_token / 1000;
            (first_ms, 1, None, true)
        }
        Behavior::Stream {
            first_ms,
            gap_ms,
            long_gap,
            done,
        } => (first_ms, gap_ms, long_gap, done),
    };
    let n = body["max_tokens"].as_u64().unwrap_or(16) as usize;
    let prompt_len = prompt.len();
    // One event per step: n tokens, a closing choice, a usage chunk, then maybe [DONE].
    let stream = futures::stream::unfold(0usize, move |i| async move {
        let event = if i < n {
            let delay = match long_gap {
                _ if i == 0 => first_ms,
                Some((at, ms)) if at == i => ms,
                _ => gap_ms,
            };
            tokio::time::sleep(Duration::from_millis(delay)).await;
            chunk(
                json!({"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": format!(" t{i}"), "finish_reason": null}]}),
            )
        } else if i == n {
            chunk(
                json!({"id": "c", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}),
            )
        } else if i == n + 1 {
            chunk(
                json!({"id": "c", "choices": [], "usage": {"prompt_tokens": prompt_len, "completion_tokens": n, "total_tokens": prompt_len + n}}),
            )
        } else if i == n + 2 && done {
            "data: [DONE]\n\n".to_string()
        } else {
            return None;
        };
        Some((Ok::<_, Infallible>(event), i + 1))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// The chart colours of braid-bench's marks, as its SVG writes them.
pub const BLUE: &str = "#1F77B4";
pub const ORANGE: &str = "#FF7F0E";
pub const GREEN: &str = "#2CA02C";

/// How many `<tag>` elements of a chart are drawn in `colour`.
pub fn drawn(svg: &str, tag: &str, colour: &str) -> usize {
    let open = format!("<{tag} ");
    let colour = format!("\"{colour}\"");
    svg.lines()
        .filter(|l| l.starts_with(&open) && l.contains(&colour))
        .count()
}
