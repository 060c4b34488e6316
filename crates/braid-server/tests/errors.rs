//! Every class of bad request gets its status and OpenAI's error JSON, and the server keeps
//! serving afterwards; overload, draining and slow clients are answered, not hung.

mod common;
mod shared_server;

use common::{error_message, start, start_with, TestServer};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Small enough that a test can exceed it cheaply.
const MAX_BODY_BYTES: usize = 64 * 1024;

fn small_bodies(args: &mut braid_server::ServeArgs) {
    args.max_body_bytes = MAX_BODY_BYTES;
}

/// The server the refusal tests share; it must keep serving whatever they send it.
fn server() -> &'static TestServer {
    shared_server::shared_server(small_bodies)
}

/// Asserts that a completion still succeeds: a refused request leaves the server unharmed.
async fn assert_still_serving(s: &TestServer, after: &str) {
    let (status, ok) = s
        .post("/v1/completions", json!({"prompt": "a", "max_tokens": 2}))
        .await;
    assert_eq!(status, 200, "after {after}: {ok}");
}

/// Posts the JSON text `body` to `path` on the shared server and asserts the refusal: `status`,
/// OpenAI's error body with a message containing `message` (and code `model_not_found` on a
/// 404), and a server still serving afterwards. Returns the error body.
async fn assert_refused(path: &str, body: impl Into<String>, status: u16, message: &str) -> Value {
    let s = server();
    let body = body.into();
    let (got, _, answer) = s.post_raw(path, "application/json", body.clone()).await;
    assert_eq!(got, status, "{body}: {answer}");
    let said = error_message(&answer);
    assert!(
        said.contains(message),
        "{body}: {said:?} should contain {message:?}"
    );
    if status == 404 {
        assert_eq!(answer["error"]["code"], "model_not_found", "{body}");
    }
    assert_still_serving(s, &body).await;
    answer
}

/// A test named `$name` that posts `$body` to `$path` and asserts the refusal.
macro_rules! refused {
    ($name:ident: $path:expr, $body:expr => $status:expr, $message:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            assert_refused($path, $body, $status, $message).await;
        }
    };
}

refused!(
    broken_json_is_400_not_valid_json:
    "/v1/completions", r#"{"prompt": "a""#
    => 400, "not valid JSON"
);

refused!(
    nan_is_400_not_valid_json:
    "/v1/completions", r#"{"prompt": "a", "temperature": NaN}"#
    => 400, "not valid JSON"
);

refused!(
    a_field_of_the_wrong_type_is_400_naming_it:
    "/v1/completions", r#"{"prompt": "a", "temperature": "hot"}"#
    => 400, "temperature"
);

refused!(
    a_chat_field_of_the_wrong_type_is_400_naming_it:
    "/v1/chat/completions", r#"{"messages": "hi"}"#
    => 400, "messages"
);

refused!(
    negative_max_tokens_is_400_with_the_bound_and_the_value:
    "/v1/completions", r#"{"prompt": "a", "max_tokens": -1}"#
    => 400, "`max_tokens` must be >= 1, got -1"
);

refused!(
    negative_temperature_is_400_with_the_bounds_and_the_value:
    "/v1/completions", r#"{"prompt": "a", "temperature": -0.5}"#
    => 400, "`temperature` must be >= 0 and <= 2, got -0.5"
);

refused!(
    zero_top_p_is_400_with_the_bound:
    "/v1/chat/completions", r#"{"messages": [{"role":"user","content":"a"}], "top_p": 0}"#
    => 400, "`top_p` must be > 0"
);

refused!(
    a_missing_prompt_is_400:
    "/v1/completions", r#"{"max_tokens": 3}"#
    => 400, "`prompt` is required"
);

refused!(
    an_empty_prompt_is_400:
    "/v1/completions", r#"{"prompt": ""}"#
    => 400, "`prompt` must not be empty"
);

refused!(
    a_token_id_outside_the_vocabulary_is_400_naming_it:
    "/v1/completions", r#"{"prompt": [1, 5000]}"#
    => 400, "token id 5000"
);

refused!(
    too_many_choices_is_400:
    "/v1/completions", r#"{"prompt": "a", "n": 17}"#
    => 400, "`n` must be >= 1 and <= 16"
);

refused!(
    more_than_four_stop_strings_is_400:
    "/v1/completions", r#"{"prompt": "a", "stop": ["a","b","c","d","e"]}"#
    => 400, "at most 4"
);

refused!(
    an_unknown_model_is_404_model_not_found_naming_it:
    "/v1/completions", r#"{"prompt": "a", "model": "gpt-9"}"#
    => 404, "`gpt-9` does not exist"
);

refused!(
    an_unknown_model_in_chat_is_404_model_not_found:
    "/v1/chat/completions", r#"{"messages": [{"role":"user","content":"a"}], "model": "x"}"#
    => 404, "does not exist"
);

refused!(
    a_prompt_plus_max_tokens_past_the_context_is_400_with_the_sum:
    "/v1/completions", json!({"prompt": "x".repeat(500), "max_tokens": 100}).to_string()
    => 400, "prompt (500 tokens) + max_tokens (100) = 600 exceeds the model's context of 512 tokens"
);

refused!(
    a_prompt_that_fills_the_context_is_400:
    "/v1/completions", json!({"prompt": "x".repeat(700)}).to_string()
    => 400, "(700 tokens) fills the model's context of 512"
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_parameter_is_named_in_param_with_type_invalid_request_error() {
    let body = assert_refused(
        "/v1/completions",
        r#"{"prompt": "a", "temperature": -1}"#,
        400,
        "temperature",
    )
    .await;
    assert_eq!(body["error"]["param"], "temperature");
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_route_is_404_with_openai_error_body_naming_it() {
    let s = server();
    let r = s.http.get(s.url("/v1/nothing")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let body: Value = r.json().await.unwrap();
    assert!(error_message(&body).contains("/v1/nothing"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_method_is_405_with_openai_error_body_naming_it() {
    let s = server();
    let r = s.http.get(s.url("/v1/completions")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let body: Value = r.json().await.unwrap();
    assert!(error_message(&body).contains("GET"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_json_is_415_asking_for_application_json() {
    let s = server();
    let (status, _, body) = s
        .post_raw("/v1/completions", "text/plain", r#"{"prompt": "a"}"#)
        .await;
    assert_eq!(status, 415);
    assert!(error_message(&body).contains("application/json"));
}

/// A JSON body over --max-body-bytes.
fn too_large() -> String {
    json!({"prompt": "x".repeat(100 * 1024)}).to_string()
}

/// `too_large()` in 8 KiB chunks with no Content-Length, so only reading it shows its size.
fn streamed_too_large() -> reqwest::Body {
    let chunks: Vec<Result<String, std::io::Error>> = too_large()
        .as_bytes()
        .chunks(8192)
        .map(|c| Ok(String::from_utf8(c.to_vec()).unwrap()))
        .collect();
    reqwest::Body::wrap_stream(futures::stream::iter(chunks))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_announced_larger_than_max_body_bytes_is_413_naming_the_limit() {
    let s = server();
    let (status, _, body) = s
        .post_raw("/v1/completions", "application/json", too_large())
        .await;
    assert_eq!(status, 413);
    assert!(error_message(&body).contains("65536 bytes"));
    assert_still_serving(s, "a 413").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_larger_than_max_body_bytes_is_413() {
    let s = server();
    let (status, _, body) = s
        .post_raw("/v1/completions", "application/json", streamed_too_large())
        .await;
    assert_eq!(status, 413, "{body}");
    assert_still_serving(s, "a streamed 413").await;
}

/// On a server of its own, so that no other test's refusals are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_bodies_are_counted_in_request_errors_by_status() {
    let s = start_with(small_bodies).await;
    let (announced, _, _) = s
        .post_raw("/v1/completions", "application/json", too_large())
        .await;
    let (streamed, _, _) = s
        .post_raw("/v1/completions", "application/json", streamed_too_large())
        .await;
    assert_eq!((announced, streamed), (413, 413));
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
