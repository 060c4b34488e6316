//! Every class of bad request gets its status and OpenAI's error JSON, and the server keeps
//! serving afterwards; overload, draining and slow clients are answered, not hung.

mod common;

use common::{error_message, start, start_with};
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_status_and_openai_error_body() {
    let s = start().await;
    let cases: Vec<(&str, &str, String, u16, &str)> = vec![
        ("broken JSON", "/v1/completions", r#"{"prompt": "a""#.into(), 400, "not valid JSON"),
        ("NaN is not JSON", "/v1/completions", r#"{"prompt": "a", "temperature": NaN}"#.into(), 400, "not valid JSON"),
        ("wrong type", "/v1/completions", r#"{"prompt": "a", "temperature": "hot"}"#.into(), 400, "temperature"),
        ("wrong type in chat", "/v1/chat/completions", r#"{"messages": "hi"}"#.into(), 400, "messages"),
        ("negative max_tokens", "/v1/completions", r#"{"prompt": "a", "max_tokens": -1}"#.into(), 400, "`max_tokens` must be >= 1, got -1"),
        ("temperature < 0", "/v1/completions", r#"{"prompt": "a", "temperature": -0.5}"#.into(), 400, "`temperature` must be >= 0 and <= 2, got -0.5"),
        ("top_p = 0", "/v1/chat/completions", r#"{"messages": [{"role":"user","content":"a"}], "top_p": 0}"#.into(), 400, "`top_p` must be > 0"),
        ("missing prompt", "/v1/completions", r#"{"max_tokens": 3}"#.into(), 400, "`prompt` is required"),
        ("empty prompt", "/v1/completions", r#"{"prompt": ""}"#.into(), 400, "`prompt` must not be empty"),
        ("token id outside the vocabulary", "/v1/completions", r#"{"prompt": [1, 5000]}"#.into(), 400, "token id 5000"),
        ("n = 2", "/v1/completions", r#"{"prompt": "a", "n": 2}"#.into(), 400, "`n` must be 1"),
        ("too many stops", "/v1/completions", r#"{"prompt": "a", "stop": ["a","b","c","d","e"]}"#.into(), 400, "at most 4"),
        ("unknown model", "/v1/completions", r#"{"prompt": "a", "model": "gpt-9"}"#.into(), 404, "`gpt-9` does not exist"),
        ("unknown model in chat", "/v1/chat/completions", r#"{"messages": [{"role":"user","content":"a"}], "model": "x"}"#.into(), 404, "does not exist"),
        (
            "prompt too long",
            "/v1/completions",
            json!({"prompt": "x".repeat(500), "max_tokens": 100}).to_string(),
            400,
            "prompt (500 tokens) + max_tokens (100) = 600 exceeds the model's context of 512 tokens",
        ),
        ("prompt fills the context", "/v1/completions", json!({"prompt": "x".repeat(700)}).to_string(), 400, "(700 tokens) fills the model's context of 512"),
    ];
    for (what, path, body, want_status, want_message) in cases {
        let (status, _, body) = s.post_raw(path, "application/json", body).await;
        assert_eq!(status, want_status, "{what}: {body}");
        let message = error_message(&body);
        assert!(
            message.contains(want_message),
            "{what}: {message:?} should contain {want_message:?}"
        );
        if want_status == 404 {
            assert_eq!(body["error"]["code"], "model_not_found", "{what}");
        }
        // The server is unharmed.
        let (status, ok) = s
            .post("/v1/completions", json!({"prompt": "a", "max_tokens": 2}))
            .await;
        assert_eq!(status, 200, "after {what}: {ok}");
    }
    let (_, _, body) = s
        .post_raw(
            "/v1/completions",
            "application/json",
            r#"{"prompt": "a", "temperature": -1}"#,
        )
        .await;
    assert_eq!(body["error"]["param"], "temperature");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_methods_content_types_and_sizes() {
    let s = start_with(|a| a.max_body_bytes = 64 * 1024).await;

    let r = s.http.get(s.url("/v1/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(error_message(&body).contains("/v1/nothing"));

    let r = s.http.get(s.url("/v1/completions")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(error_message(&body).contains("GET"));

    let (status, _, body) = s
        .post_raw("/v1/completions", "text/plain", r#"{"prompt": "a"}"#)
        .await;
    assert_eq!(status, 415);
    assert!(error_message(&body).contains("application/json"));

    // Too large, announced by Content-Length and streamed without one.
    let big = json!({"prompt": "x".repeat(100 * 1024)}).to_string();
    let (status, _, body) = s
        .post_raw("/v1/completions", "application/json", big.clone())
        .await;
    assert_eq!(status, 413);
    assert!(error_message(&body).contains("65536 bytes"));
    let chunks: Vec<Result<String, std::io::Error>> = big
        .as_bytes()
        .chunks(8192)
        .map(|c| Ok(String::from_utf8(c.to_vec()).unwrap()))
        .collect();
    let streamed = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let (status, _, body) = s
        .post_raw("/v1/completions", "application/json", streamed)
        .await;
    assert_eq!(status, 413, "{body}");

    let (status, ok) = s
        .post("/v1/completions", json!({"prompt": "a", "max_tokens": 2}))
        .await;
    assert_eq!(status, 200, "{ok}");

    let (_, text) = s.get("/metrics").await;
    let line = text
        .lines()
        .find(|l| l.starts_with("braid_request_errors_total{status=\"413\"}"))
        .expect("413s are counted");
    assert!(line.ends_with(" 2"), "{line}");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_429_with_retry_after() {
    let s = start_with(|a| {
        a.max_num_seqs = 1;
        a.max_waiting = 1;
    })
    .await;
    let req = json!({"prompt": "a", "max_tokens": 480, "ignore_eos": true});
    let sends = (0..12).map(|_| s.http.post(s.url("/v1/completions")).json(&req).send());
    let responses = futures::future::join_all(sends).await;
    let mut rejected = 0;
    for r in responses {
        let r = r.unwrap();
        match r.status().as_u16() {
            200 => {}
            429 => {
                rejected += 1;
                assert_eq!(r.headers()["retry-after"], "1");
                let body: serde_json::Value = r.json().await.unwrap();
                assert!(error_message(&body).contains("capacity"));
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(
        rejected > 0,
        "12 requests at once with one running and one waiting must overflow"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_refuses_new_work_and_finishes_running_streams() {
    let s = start().await;
    // A few long streams, so that draining takes a while.
    let req = json!({"prompt": "a", "max_tokens": 480, "ignore_eos": true, "stream": true});
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut r = s
            .http
            .post(s.url("/v1/completions"))
            .json(&req)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let first = r.chunk().await.unwrap().expect("a first chunk");
        streams.push((r, String::from_utf8_lossy(&first).into_owned()));
    }
    s.server.as_ref().unwrap().shutdown();
    // While the streams run, the server is draining: /health and new requests say 503.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = s.get("/health").await;
        if status == 503 {
            assert_eq!(body, r#"{"status":"draining"}"#);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/health never said draining"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let r = s
        .http
        .post(s.url("/v1/completions"))
        .json(&json!({"prompt": "b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "draining");
    for (mut stream, mut text) in streams {
        while let Some(c) = tokio::time::timeout(Duration::from_secs(30), stream.chunk())
            .await
            .expect("stream stalled")
            .unwrap()
        {
            text.push_str(&String::from_utf8_lossy(&c));
        }
        assert!(
            text.trim_end().ends_with("data: [DONE]"),
            "a running stream completes: ...{}",
            &text[text.len().saturating_sub(200)..]
        );
        assert!(text.contains("\"finish_reason\":\"length\""));
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_is_disconnected() {
    let s = start_with(|a| a.header_read_timeout_secs = 1).await;
    let addr = s.server.as_ref().unwrap().local_addr();
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // Never finish the headers: the server must close the connection.
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf))
        .await
        .expect("the server kept a slow client past 5 s");
    assert!(matches!(read, Ok(_) | Err(_)));
    let (status, _) = s
        .post("/v1/completions", json!({"prompt": "a", "max_tokens": 1}))
        .await;
    assert_eq!(status, 200);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_model_file_fails_with_its_fix() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = braid_server::ServeArgs::with_model(dir.path().join("nope.gguf"));
    args.port = 0;
    let server = braid_server::start(args).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .unwrap()
        .unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains("nope.gguf") && message.contains("fetch-model.sh"),
        "{message}"
    );
}
