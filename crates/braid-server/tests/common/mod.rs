//! A real braid server on 127.0.0.1:0 serving the tiny random-weight test model, and small
//! helpers to talk to it. Every wait here is bounded.

#![allow(dead_code)]

use braid_server::{ServeArgs, Server};
use serde_json::Value;
use std::time::{Duration, Instant};

pub const MODEL_NAME: &str = "tiny-model";

pub struct TestServer {
    pub base: String,
    pub http: reqwest::Client,
    pub server: Option<Server>,
    _dir: tempfile::TempDir,
}

/// Starts a server with the test defaults, after `configure` adjusts its flags, and waits
/// until /health says ok.
pub async fn start_with(configure: impl FnOnce(&mut ServeArgs)) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("{MODEL_NAME}.gguf"));
    braid_model::tiny_gguf::write(&path, 7).expect("write the tiny model");
    let mut args = ServeArgs::with_model(&path);
    args.port = 0;
    args.kv_cache_mb = 16;
    args.threads = Some(1);
    configure(&mut args);
    let server = braid_server::start(args).await.expect("start the server");
    let base = format!("http://{}", server.local_addr());
    // No idle connections kept: a server with a short header-read timeout closes them, and a
    // request sent on one just as it closes fails in the client, not in the server.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let t = TestServer {
        base,
        http,
        server: Some(server),
        _dir: dir,
    };
    t.wait_healthy().await;
    t
}

pub async fn start() -> TestServer {
    start_with(|_| {}).await
}

impl TestServer {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = self.http.get(self.url("/health")).send().await {
                if r.status() == 200 {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the server did not become healthy within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// POSTs JSON; returns the status and the parsed body.
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("body is not JSON ({e}): {text}")),
        )
    }

    /// POSTs raw bytes with a content type; returns status, headers and parsed body.
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let r = self
            .http
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.expect("body");
        (
            status,
            headers,
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("body is not JSON ({e}): {text}")),
        )
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self.http.get(self.url(path)).send().await.expect("request");
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    /// POSTs a streaming request; returns the status and every `data:` payload in order.
    pub async fn stream(&self, path: &str, body: Value) -> (u16, Vec<String>) {
        let r = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        let ct = r
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = r.text().await.expect("body");
        if status == 200 {
            assert!(ct.starts_with("text/event-stream"), "content type {ct}");
        }
        (status, sse_data(&text))
    }

    pub async fn shutdown(mut self) {
        let server = self.server.take().unwrap();
        server.shutdown();
        tokio::time::timeout(Duration::from_secs(30), server.wait())
            .await
            .expect("shutdown within 30 s")
            .expect("clean shutdown");
    }
}

/// The `data:` payloads of an SSE body.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

/// Asserts OpenAI's error body shape and returns the message.
pub fn error_message(body: &Value) -> String {
    let e = &body["error"];
    assert!(e.is_object(), "not an OpenAI error body: {body}");
    assert!(e["message"].is_string() && e["type"].is_string(), "{body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "param and code must be present (maybe null): {body}"
    );
    e["message"].as_str().unwrap().to_string()
}
