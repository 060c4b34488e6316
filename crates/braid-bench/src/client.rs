//! One streaming completion, timed chunk by chunk.
//!
//! The client is the only place that reads a clock during a request, and it reads it at
//! the moment bytes arrive: a token's time is when the client could have shown it, which
//! is what TTFT and ITL are about. Everything that can go wrong — a refused connection,
//! a non-2xx answer, a stream that stops before `data: [DONE]`, the run's deadline — ends
//! as a record with an outcome rather than an error, because failures are data in a
//! load test.
//!
//! Every request opens its own connection. A pooled keep-alive connection can be closed by
//! the server just as the client reuses it (llama.cpp's server does so after a stream),
//! which would count as a failure of the server; a fresh loopback connection costs well
//! under a millisecond of TTFT, the same for every server.
//!
//! A chunk counts as a token when it has a choice whose text is non-empty, or whose
//! `finish_reason` is not yet set (a token that decoded to no printable text yet). An
//! empty choice that only carries a `finish_reason`, and a usage-only chunk, are not
//! tokens.

use crate::prompts::Prompt;
use crate::record::{Outcome, RequestRecord};
use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::{timeout_at, Instant};

/// A connection to one OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
    /// Sent as every request's `response_format` (`braid bench --json-schema`).
    response_format: Option<Value>,
    /// Completions are sampled at this temperature, seeded per request, instead of greedy.
    sampled: Option<f64>,
}

/// How one request went, with times as seconds since it was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub sent: Instant,
    pub token_times_s: Vec<f64>,
    pub end_s: f64,
    pub usage_completion_tokens: Option<u64>,
    pub usage_prompt_tokens: Option<u64>,
    pub status: Option<u16>,
    pub outcome: Outcome,
    pub error: Option<String>,
}

impl Trace {
    /// The record of this trace within a run that started at `t0`.
    pub fn into_record(
        self,
        id: usize,
        group: &str,
        prompt_tokens: usize,
        max_tokens: usize,
        t0: Instant,
    ) -> RequestRecord {
        RequestRecord {
            id,
            group: group.to_string(),
            prompt_tokens,
            max_tokens,
            sent_s: self.sent.saturating_duration_since(t0).as_secs_f64(),
            token_times_s: self.token_times_s,
            end_s: self.end_s,
            usage_completion_tokens: self.usage_completion_tokens,
            usage_prompt_tokens: self.usage_prompt_tokens,
            status: self.status,
            outcome: self.outcome,
            error: self.error,
        }
    }
}

impl Client {
    pub fn new(base_url: &str, api_key: Option<String>) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .pool_max_idle_per_host(0)
            .build()?;
        Ok(Client {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            api_key,
            response_format: None,
            sampled: None,
        })
    }

    /// Every request asks for JSON following `schema` (OpenAI's `response_format` of type
    /// `json_schema`), to measure what a structured output costs.
    pub fn with_json_schema(mut self, schema: Value) -> Self {
        self.response_format = Some(json!({
            "type": "json_schema",
            "json_schema": {"name": "bench", "schema": schema, "strict": true},
        }));
        self
    }

    /// Completions are sampled at `temperature`, each with a seed of its own (the same for the
    /// same prompt), instead of greedy: text nothing can predict.
    pub fn sampled(mut self, temperature: f64) -> Self {
        self.sampled = Some(temperature);
        self
    }

    /// `path` under the server's `/v1`, whether or not the base URL already ends in it.
    pub fn endpoint(&self, path: &str) -> String {
        if self.base.ends_with("/v1") {
            format!("{}/{path}", self.base)
        } else {
            format!("{}/v1/{path}", self.base)
        }
    }

    fn authorized(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(k) => rb.bearer_auth(k),
            None => rb,
        }
    }

    /// The first model id the server lists, if it lists any.
    pub async fn first_model(&self) -> Option<String> {
        let rb = self.authorized(self.http.get(self.endpoint("models")));
        let resp = rb.timeout(Duration::from_secs(10)).send().await.ok()?;
        let v: Value = resp.error_for_status().ok()?.json().await.ok()?;
        v["data"][0]["id"].as_str().map(str::to_string)
    }

    /// The server's Prometheus text at `/metrics` (beside `/v1`), if it serves one.
    pub async fn metrics(&self) -> Option<String> {
        let resp = self.get_root("metrics").await?;
        tokio::time::timeout(Duration::from_secs(10), resp.text())
            .await
            .ok()?
            .ok()
    }

    /// A successful answer to `GET path` beside `/v1` (its headers within 10 s; the body
    /// may stream for as long as the caller reads it), or `None`.
    pub async fn get_root(&self, path: &str) -> Option<reqwest::Response> {
        let root = self.base.strip_suffix("/v1").unwrap_or(&self.base);
        let rb = self.authorized(self.http.get(format!("{root}/{path}")));
        let resp = tokio::time::timeout(Duration::from_secs(10), rb.send())
            .await
            .ok()?
            .ok()?;
        resp.error_for_status().ok()
    }

    /// The model to ask for: the one given, else the server's first, else "default".
    pub async fn resolve_model(&self, explicit: Option<&str>) -> String {
        match explicit {
            Some(m) => m.to_string(),
            None => self
                .first_model()
                .await
                .unwrap_or_else(|| "default".to_string()),
        }
    }

    /// Sends one streaming completion and times it; never waits past `deadline`.
    pub async fn complete(
        &self,
        model: &str,
        prompt: &Prompt,
        max_tokens: usize,
        deadline: Instant,
    ) -> Trace {
        let mut body = request_body(model, prompt, max_tokens, self.response_format.as_ref());
        if let Some(t) = self.sampled {
            body["temperature"] = json!(t);
            body["seed"] = json!(crate::prompts::mix(0, prompt_hash(prompt)) >> 1);
        }
        self.stream("completions", &body, deadline).await
    }

    /// Sends one streaming, greedy chat completion of `messages`, with OpenAI's `prediction`
    /// when one is given, and times it; the answer ends where the model ends it (or at
    /// `max_tokens`).
    pub async fn chat(
        &self,
        model: &str,
        messages: &Value,
        prediction: Option<&str>,
        max_tokens: usize,
        deadline: Instant,
    ) -> Trace {
        let mut body = json!({
            "model": model,
            "messages": messages,
            "max_tokens": max_tokens,
            "stream": true,
            "temperature": 0,
            "stream_options": {"include_usage": true},
        });
        if let Some(text) = prediction {
            body["prediction"] = json!({"type": "content", "content": text});
        }
        self.stream("chat/completions", &body, deadline).await
    }

    /// POSTs `body` to `path` under `/v1`, reads its SSE stream and times each token.
    async fn stream(&self, path: &str, body: &Value, deadline: Instant) -> Trace {
        let rb = self.authorized(self.http.post(self.endpoint(path)).json(body));
        let sent = Instant::now();
        let mut t = Trace {
            sent,
            token_times_s: vec![],
            end_s: 0.0,
            usage_completion_tokens: None,
            usage_prompt_tokens: None,
            status: None,
            outcome: Outcome::Ok,
            error: None,
        };
        let since = |sent: Instant| Instant::now().saturating_duration_since(sent).as_secs_f64();
        let resp = match timeout_at(deadline, rb.send()).await {
            Err(_) => {
                return t.fail(
                    Outcome::Deadline,
                    "deadline reached before a response",
                    since(sent),
                )
            }
            Ok(Err(e)) => return t.fail(Outcome::Transport, &error_chain(&e), since(sent)),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        t.status = Some(status.as_u16());
        if !status.is_success() {
            let text_deadline = deadline.min(Instant::now() + Duration::from_secs(5));
            let text = timeout_at(text_deadline, resp.text()).await;
            let msg = match text {
                Ok(Ok(s)) if !s.is_empty() => truncate(&s, 300),
                _ => status.to_string(),
            };
            return t.fail(Outcome::HttpError, &msg, since(sent));
        }
        let mut events = std::pin::pin!(sse_events(resp.bytes_stream()));
        loop {
            let next = match timeout_at(deadline, events.next()).await {
                Err(_) => {
                    return t.fail(
                        Outcome::Deadline,
                        "deadline reached mid-stream",
                        since(sent),
                    )
                }
                Ok(n) => n,
            };
            let now = since(sent);
            let data = match next {
                None => return t.fail(Outcome::Incomplete, "stream ended without [DONE]", now),
                Some(Err(e)) => return t.fail(Outcome::Incomplete, &e, now),
                Some(Ok(SseEvent::Data(d))) => d,
                Some(Ok(SseEvent::Done)) => {
                    t.end_s = now;
                    // Read the body to its end (briefly) so the connection goes back
                    // to the pool and the next request does not pay for a new one.
                    let drain = deadline.min(Instant::now() + Duration::from_millis(200));
                    let _ =
                        timeout_at(drain, async { while events.next().await.is_some() {} }).await;
                    return t;
                }
            };
            let chunk = match serde_json::from_str::<Value>(&data) {
                Ok(v) => Chunk::from_json(&v),
                Err(_) => {
                    let msg = format!("malformed chunk: {}", truncate(&data, 200));
                    return t.fail(Outcome::Incomplete, &msg, now);
                }
            };
            if let Some(err) = chunk.error {
                return t.fail(Outcome::Incomplete, &err, now);
            }
            if chunk.token {
                t.token_times_s.push(now);
            }
            if chunk.completion_tokens.is_some() {
                t.usage_completion_tokens = chunk.completion_tokens;
                t.usage_prompt_tokens = chunk.prompt_tokens;
            }
        }
    }
}

impl Trace {
    fn fail(mut self, outcome: Outcome, msg: &str, end_s: f64) -> Trace {
        self.outcome = outcome;
        self.error = Some(msg.to_string());
        self.end_s = end_s;
        self
    }
}

/// The JSON body of every benchmark request: streamed, greedy, exactly `max_tokens` long;
/// with a `response_format`, up to `max_tokens` long, since a structured output ends where its
/// schema is complete (and a server refuses `ignore_eos` with it).
pub fn request_body(
    model: &str,
    prompt: &Prompt,
    max_tokens: usize,
    response_format: Option<&Value>,
) -> Value {
    let mut body = json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": true,
        "temperature": 0,
        "stream_options": {"include_usage": true},
    });
    match response_format {
        Some(format) => body["response_format"] = format.clone(),
        None => body["ignore_eos"] = json!(true),
    }
    body
}

/// A stable hash of a prompt, for its seed.
fn prompt_hash(prompt: &Prompt) -> u64 {
    let text = serde_json::to_string(prompt).unwrap_or_default();
    text.bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

fn truncate(s: &str, max_chars: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// An event of an OpenAI-style SSE stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    Data(String),
    Done,
}

/// The non-empty `data` events of a byte stream, `[DONE]` told apart; an error is its
/// message. Comments, other fields, `\r\n` and events cut across network reads are
/// eventsource-stream's to handle.
pub fn sse_events<S, B, E>(bytes: S) -> impl Stream<Item = Result<SseEvent, String>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::error::Error,
{
    bytes.eventsource().filter_map(|event| async move {
        match event {
            Err(EventStreamError::Transport(e)) => Some(Err(error_chain(&e))),
            Err(e) => Some(Err(e.to_string())),
            Ok(event) => match event.data.trim() {
                "" => None,
                "[DONE]" => Some(Ok(SseEvent::Done)),
                data => Some(Ok(SseEvent::Data(data.to_string()))),
            },
        }
    })
}

/// What one JSON chunk of a completion stream says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    pub token: bool,
    pub completion_tokens: Option<u64>,
    pub prompt_tokens: Option<u64>,
    pub error: Option<String>,
}

impl Chunk {
    pub fn from_json(v: &Value) -> Chunk {
        let error = v.get("error").filter(|e| !e.is_null()).map(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| e.to_string())
        });
        let token = match v["choices"].get(0) {
            Some(c) => {
                let text = c["text"]
                    .as_str()
                    .or_else(|| c["delta"]["content"].as_str())
                    .unwrap_or("");
                !text.is_empty() || c["finish_reason"].is_null()
            }
            None => false,
        };
        Chunk {
            token,
            completion_tokens: v["usage"]["completion_tokens"].as_u64(),
            prompt_tokens: v["usage"]["prompt_tokens"].as_u64(),
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sse_events_split_across_reads() {
        let reads: [&[u8]; 3] = [
            b"data: {\"a\"",
            b":1}\r\n\r\n: keep-alive\nevent: x\ndata: [DONE]\n\n",
            b"data:{}\n\n",
        ];
        let bytes = futures::stream::iter(reads.map(Ok::<_, std::io::Error>));
        let events: Vec<_> = sse_events(bytes).collect().await;
        let want = [
            SseEvent::Data("{\"a\":1}".into()),
            SseEvent::Done,
            SseEvent::Data("{}".into()),
        ];
        assert_eq!(events, want.map(Ok));
    }

    #[tokio::test]
    async fn sse_transport_errors_keep_their_message() {
        let bytes = futures::stream::iter([
            Ok(&b"data: {}\n\n"[..]),
            Err(std::io::Error::other("connection reset")),
        ]);
        let events: Vec<_> = sse_events(bytes).collect().await;
        assert_eq!(
            events,
            [
                Ok(SseEvent::Data("{}".into())),
                Err("connection reset".into())
            ]
        );
    }

    #[test]
    fn token_usage_and_error_chunks() {
        let c = |s: &str| Chunk::from_json(&serde_json::from_str(s).unwrap());
        assert!(c(r#"{"choices":[{"text":"hi","finish_reason":null}]}"#).token);
        // Last token and finish reason in one chunk (vLLM).
        assert!(c(r#"{"choices":[{"text":"x","finish_reason":"length"}]}"#).token);
        // Empty text, no finish reason yet: a token still held back by the detokenizer.
        assert!(c(r#"{"choices":[{"text":""}]}"#).token);
        // Closing marker (llama-server), usage-only chunk (vLLM): not tokens.
        assert!(!c(r#"{"choices":[{"text":"","finish_reason":"length"}]}"#).token);
        let u = c(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":9}}"#);
        assert_eq!(
            (u.token, u.completion_tokens, u.prompt_tokens),
            (false, Some(9), Some(5))
        );
        assert_eq!(
            c(r#"{"choices":[{"text":"a"}],"usage":null}"#).completion_tokens,
            None
        );
        let e = c(r#"{"error":{"message":"boom","type":"x"}}"#);
        assert_eq!(e.error.as_deref(), Some("boom"));
    }

    #[test]
    fn body_asks_for_a_greedy_stream_of_fixed_length() {
        let b = request_body("m", &Prompt::Tokens(vec![5, 6]), 7, None);
        assert_eq!(b["prompt"], json!([5, 6]));
        assert_eq!(b["max_tokens"], 7);
        assert_eq!(b["stream"], true);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["temperature"], 0);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert!(b.get("response_format").is_none());
    }

    #[test]
    fn a_json_schema_goes_on_the_body_as_response_format_without_ignore_eos() {
        let c = Client::new("http://127.0.0.1:1", None)
            .unwrap()
            .with_json_schema(json!({"type": "object"}));
        let b = request_body("m", &Prompt::Tokens(vec![5]), 7, c.response_format.as_ref());
        assert_eq!(b["response_format"]["type"], "json_schema");
        assert_eq!(
            b["response_format"]["json_schema"]["schema"],
            json!({"type": "object"})
        );
        assert!(b.get("ignore_eos").is_none());
    }

    #[test]
    fn endpoint_accepts_base_with_or_without_v1() {
        let c = Client::new("http://127.0.0.1:1/", None).unwrap();
        assert_eq!(
            c.endpoint("completions"),
            "http://127.0.0.1:1/v1/completions"
        );
        let c = Client::new("http://127.0.0.1:1/v1", None).unwrap();
        assert_eq!(c.endpoint("models"), "http://127.0.0.1:1/v1/models");
    }
}
