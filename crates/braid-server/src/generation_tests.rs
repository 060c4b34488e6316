//! Tests of a request's life against a scripted fake engine: the cases a real engine rarely
//! produces on demand (a failure mid-stream, a stalled sequence hitting the deadline, a
//! dropped request), that a matched stop string or the deadline ends the request in the
//! engine with the tokens passed on, that a client that leaves does not, and that a request
//! the KV pool can never hold is refused with a 400 before it reaches the engine.

use super::*;
use crate::app::router;
use crate::args::ServeArgs;
use crate::engine_observer::MetricsObserver;
use crate::metrics::Metrics;
use crate::validation::Limits;
use axum::body::Body;
use braid_engine::{EngineHandle, EngineMessage, Submitted};
use braid_model::SamplingParams;
use braid_sched::SchedulerConfig;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;
use tower::ServiceExt;

fn model() -> Arc<LoadedModel> {
    static MODEL: OnceLock<Arc<LoadedModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("tiny.gguf");
            braid_model::tiny_gguf::write(&path, 3).unwrap();
            Arc::new(LoadedModel::load(&path).unwrap())
        })
        .clone()
}

/// The id of the one-byte token `b`.
fn byte_token(b: u8) -> u32 {
    let m = model();
    (0..m.tokenizer.vocab_size() as u32)
        .find(|&i| m.tokenizer.token_bytes(i) == [b])
        .unwrap()
}

fn token(b: u8) -> EngineEvent {
    EngineEvent::Token {
        token: Sampled {
            token: byte_token(b),
            logprob: None,
            top: vec![],
            rank: None,
        },
        finished: None,
    }
}

/// The `finish` calls a fake engine received: (request id, reason, tokens passed on).
type Finishes = Arc<Mutex<Vec<(u64, FinishReason, usize)>>>;

/// A ready server state whose engine is `script`, run on its own thread for each request.
fn fake_server(request_timeout_secs: u64, script: fn(EngineRequest)) -> AppState {
    fake_server_with_pool(request_timeout_secs, 1024, script).0
}

/// `fake_server` with a KV pool of `num_blocks` blocks of 16 tokens, and the finishes its
/// engine was told of (each answered with `Done`, as the engine does).
fn fake_server_with_pool(
    request_timeout_secs: u64,
    num_blocks: usize,
    script: fn(EngineRequest),
) -> (AppState, Finishes) {
    let mut args = ServeArgs::with_model("tiny.gguf");
    args.request_timeout_secs = request_timeout_secs;
    let metrics = Arc::new(Metrics::new());
    let state = AppState::new(&args, metrics.clone());
    let (tx, rx) = mpsc::channel::<EngineMessage>();
    let sched = SchedulerConfig {
        num_blocks,
        max_model_len: 512,
        ..SchedulerConfig::default()
    };
    let engine = EngineHandle::new(tx, sched, 8);
    let finishes = Finishes::default();
    let told = finishes.clone();
    std::thread::spawn(move || {
        let mut channels = HashMap::new();
        while let Ok(message) = rx.recv() {
            match message {
                EngineMessage::Submit(sub) => {
                    let Submitted { request, waiting } = *sub;
                    drop(waiting); // scheduled at once
                                   // Weak: a script that drops its request closes the channel, as the engine does.
                    channels.insert(request.id, request.events.downgrade());
                    std::thread::spawn(move || script(request));
                }
                EngineMessage::Finish {
                    id,
                    reason,
                    completion_tokens,
                } => {
                    told.lock().unwrap().push((id, reason, completion_tokens));
                    if let Some(events) = channels[&id].upgrade() {
                        let _ = events.send(EngineEvent::Done(Finished {
                            reason,
                            prompt_tokens: 1,
                            completion_tokens,
                            cached_tokens: 0,
                            queue_secs: None,
                            prediction: None,
                        }));
                    }
                }
                EngineMessage::FlushPrefixCache(answer) => {
                    let _ = answer.send(0);
                }
                EngineMessage::Embed(sub) => {
                    let _ = sub
                        .request
                        .answer
                        .send(Err("no embedding model here".into()));
                }
            }
        }
    });
    let m = model();
    let limits = Limits {
        served_model_name: state.served_model_name.clone(),
        embedding_model_name: None,
        context_length: 512,
        vocab_size: m.tokenizer.vocab_size(),
        max_tokens_cap: 512,
        max_stop_strings: 4,
        max_stop_string_len: 64,
        max_prompt_tokens: 512,
        max_request_tokens: 100_000,
        special_in_messages: false,
        reasoning_parser: crate::args::ReasoningParser::Auto,
        tool_syntax: braid_text::tool_calls::ToolSyntax::Hermes,
    };
    state.set_ready(Ready {
        model: Some(m),
        embedder: None,
        pooling: None,
        engine,
        observer: MetricsObserver::new(metrics, None),
        limits,
        created: 0,
        kv_events: None,
    });
    (state, finishes)
}

/// Starts a test generation of `request(max_tokens, stops)`.
fn start(state: &AppState, max_tokens: usize, stops: &[&str]) -> Generation {
    let ready = state.get_ready().unwrap();
    let req = request(max_tokens, stops);
    Generation::start(
        state,
        ready,
        req,
        Instant::now(),
        &crate::request_origin::RequestOrigin::of("test", &Default::default()),
        None,
        None,
    )
    .unwrap()
}

fn request(max_tokens: usize, stops: &[&str]) -> ValidatedRequest {
    ValidatedRequest {
        prompt: vec![byte_token(b'a')],
        max_tokens,
        params: SamplingParams::greedy(),
        stop_strings: stops.iter().map(|s| s.to_string()).collect(),
        keep_stop_string: false,
        skip_special_tokens: true,
        stop_token_ids: vec![],
        stream: false,
        include_usage: false,
        echo: None,
        logprobs: None,
        score_prompt: None,
        prompt_logprobs: None,
        more_prompts: vec![],
        n: 1,
        constraint: None,
        tools: None,
        reasoning: None,
        prediction: None,
    }
}

async fn post(state: &AppState, body: serde_json::Value) -> (u16, String) {
    let req = axum::http::Request::post("/v1/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = router(state.clone(), Duration::from_secs(5))
        .oneshot(req)
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn a_stalled_sequence_ends_at_the_deadline_with_length() {
    let (state, finishes) = fake_server_with_pool(1, 1024, |req| {
        let _ = req.events.send(token(b'x'));
        let _ = req.events.send(token(b'y'));
        // Never finishes; holds the channel open until the client gives up.
        while !req.events.is_closed() {
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let started = Instant::now();
    let g = start(&state, 100, &[]);
    let id = g.id;
    let out = g.collect().await.unwrap();
    assert_eq!(
        (out.text.as_str(), out.finish, out.usage.completion_tokens),
        ("xy", FinishReason::Length, 2)
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(
        *finishes.lock().unwrap(),
        [(id, FinishReason::Length, 2)],
        "the engine is told, so it reports the request"
    );
}

#[tokio::test]
async fn a_stop_string_cuts_the_text_and_finishes_the_request_in_the_engine() {
    let (state, finishes) = fake_server_with_pool(10, 1024, |req| {
        for b in *b"abcdef" {
            let _ = req.events.send(token(b));
        }
        // Still running when the finish comes, as a real sequence would be.
        while !req.events.is_closed() {
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let g = start(&state, 100, &["cd"]);
    let id = g.id;
    let out = g.collect().await.unwrap();
    assert_eq!(
        (out.text.as_str(), out.finish, out.usage.completion_tokens),
        ("ab", FinishReason::Stop, 4)
    );
    assert_eq!(
        *finishes.lock().unwrap(),
        [(id, FinishReason::Stop, 4)],
        "told once, with the tokens passed on (not the two sent after them), before the answer"
    );
}

#[tokio::test]
async fn a_client_that_leaves_is_not_finished_in_the_engine() {
    static CANCELLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let (state, finishes) = fake_server_with_pool(10, 1024, |req| {
        let _ = req.events.send(token(b'x'));
        for _ in 0..2500 {
            if req.events.is_closed() {
                CANCELLED.store(true, Ordering::Release);
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let mut g = start(&state, 100, &[]);
    assert!(g.next().await.unwrap().is_ok());
    drop(g);
    for _ in 0..2500 {
        if CANCELLED.load(Ordering::Acquire) {
            assert!(finishes.lock().unwrap().is_empty());
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the engine never saw the request cancelled");
}

#[tokio::test]
async fn held_text_is_released_when_the_engine_finishes() {
    let state = fake_server(10, |req| {
        for b in *b"xa" {
            let _ = req.events.send(token(b));
        }
        let _ = req.events.send(EngineEvent::Done(Finished {
            reason: FinishReason::Stop,
            prompt_tokens: 1,
            completion_tokens: 2,
            cached_tokens: 0,
            queue_secs: None,
            prediction: None,
        }));
    });
    let g = start(&state, 100, &["ab"]);
    let out = g.collect().await.unwrap();
    assert_eq!((out.text.as_str(), out.finish), ("xa", FinishReason::Stop));
}

#[tokio::test]
async fn an_engine_failure_is_a_500_or_an_sse_error_event() {
    let state = fake_server(10, |req| {
        let _ = req.events.send(token(b'x'));
        let _ = req
            .events
            .send(EngineEvent::Failed("the forward pass failed".into()));
    });
    let (status, body) = post(&state, serde_json::json!({"prompt": "a"})).await;
    assert_eq!(status, 500, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("the forward pass failed"));
    assert_eq!(v["error"]["type"], "server_error");

    let (status, body) = post(&state, serde_json::json!({"prompt": "a", "stream": true})).await;
    assert_eq!(status, 200);
    let events: Vec<&str> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(events.len(), 3, "{body}");
    assert!(events[0].contains("\"text\":\"x\""), "{body}");
    let err: serde_json::Value = serde_json::from_str(events[1]).unwrap();
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("the forward pass failed"));
    assert_eq!(events[2], "[DONE]");
    let metrics = state.metrics.render();
    assert!(
        metrics.contains("braid_request_errors_total{status=\"500\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_request_larger_than_the_kv_pool_is_a_400_naming_both_sizes() {
    // 4 blocks of 16 tokens: 64 KV positions; 1 prompt token + 100 - 1 needs 100.
    let (state, _) = fake_server_with_pool(10, 4, drop);
    let (status, body) = post(
        &state,
        serde_json::json!({"prompt": "a", "max_tokens": 100}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("100") && message.contains("64"),
        "{message}"
    );
    assert_eq!(v["error"]["code"], "kv_cache_exceeded");
    let (status, _) = post(&state, serde_json::json!({"prompt": "a", "max_tokens": 60})).await;
    assert_eq!(
        status, 500,
        "fits, so it reaches the fake engine, which drops it"
    );
}

#[tokio::test]
async fn a_request_the_engine_drops_is_an_error_not_a_hang() {
    let state = fake_server(10, drop);
    let g = start(&state, 5, &[]);
    let err = tokio::time::timeout(Duration::from_secs(5), g.collect())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.status, axum::http::StatusCode::INTERNAL_SERVER_ERROR);
}
