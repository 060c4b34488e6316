//! Property tests (proptest) over request parsing and validation, on the tiny test model.
//!
//! Generated bodies mix the API's real fields (valid values, boundaries, wrong types, huge and
//! negative numbers, odd strings) with arbitrary JSON, unknown fields and corrupted bytes. The
//! properties: nothing panics; a body either parses or becomes a 400 naming the problem; a
//! parsed request is either refused with a 4xx and a message, or comes out of validation
//! inside every bound the engine relies on. A last property sends such requests through the
//! whole router to a running engine and checks that nothing answers 5xx.
//!
//! Bounded for CI: a fixed number of cases each (a few seconds in release). For a longer hunt,
//! raise it: `BRAID_FUZZ_CASES=200000 cargo test --release -p braid-server --test fuzz_requests`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use braid_model::LoadedModel;
use braid_server::app::router;
use braid_server::error::{ApiError, ValidationError};
use braid_server::field_bounds::{
    Kind, NumericField, CHAT_ONLY_FIELDS, COMPLETION_ONLY_FIELDS, FREQUENCY_PENALTY, LOGIT_BIAS,
    LOGPROBS, MIN_P, N, PRESENCE_PENALTY, PROMPT_LOGPROBS, REPETITION_PENALTY, SAMPLING_FIELDS,
    TEMPERATURE, TOP_P,
};
use braid_server::metrics::Metrics;
use braid_server::openai_types::{
    ChatCompletionRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest,
};
use braid_server::state::{AppState, Ready};
use braid_server::validation::{self, Limits, ValidatedRequest};
use braid_server::ServeArgs;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tower::ServiceExt;

const KEY: &str = "fuzz-key";

fn cases(default: u32) -> u32 {
    std::env::var("BRAID_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

struct Fixture {
    model: Arc<LoadedModel>,
    _dir: tempfile::TempDir,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny-model.gguf");
        braid_model::tiny_gguf::write(&path, 11).unwrap();
        Fixture {
            model: Arc::new(LoadedModel::load(&path).unwrap()),
            _dir: dir,
        }
    })
}

fn limits() -> Limits {
    let m = &fixture().model;
    Limits {
        served_model_name: "tiny-model".into(),
        embedding_model_name: None,
        context_length: m.config().context_length,
        vocab_size: m.tokenizer.vocab_size(),
        max_tokens_cap: 8,
        max_stop_strings: 4,
        max_stop_string_len: 16,
        max_prompt_tokens: 200,
        max_request_tokens: 100_000,
        special_in_messages: false,
        reasoning_parser: braid_server::args::ReasoningParser::Auto,
        tool_syntax: braid_text::tool_calls::ToolSyntax::Hermes,
    }
}

// ------------------------------------------------------------------ strategies

fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,12}",
        ".{0,24}",
        Just(String::new()),
        Just("<|im_start|><|im_end|>".to_string()),
        Just("\u{0}\u{202e}\u{1F600}\u{200d}\u{fffd}".to_string()),
        (1usize..3000).prop_map(|n| "word ".repeat(n)),
    ]
}

fn odd_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        (-3i64..30).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |x| x.is_finite())
            .prop_map(Value::from),
        (-3.0f64..3.0).prop_map(Value::from),
        prop::sample::select(vec![
            0.0,
            -0.0,
            1.0,
            2.0,
            2.0000001,
            1e-300,
            1e300,
            -1e300,
            f64::MAX,
            f64::MIN_POSITIVE
        ])
        .prop_map(Value::from),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        odd_number(),
        odd_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn token_ids() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::collection::vec(0i64..262, 0..40).prop_map(|v| json!(v)),
        prop::collection::vec(-5i64..100_000, 0..8).prop_map(|v| json!(v)),
        prop::collection::vec(0i64..262, 150..260).prop_map(|v| json!(v)),
    ]
}

fn prompt() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => odd_string().prop_map(Value::String),
        2 => token_ids(),
        1 => odd_string().prop_map(|s| json!([s])),
        1 => token_ids().prop_map(|ids| json!([ids])),
        1 => prop::collection::vec(odd_string(), 2..4).prop_map(|v| json!(v)),
        1 => any_json(),
    ]
}

fn stop() -> impl Strategy<Value = Value> {
    prop_oneof![
        odd_string().prop_map(Value::String),
        prop::collection::vec("[a-z]{0,20}", 0..7).prop_map(|v| json!(v)),
        Just(Value::Null),
        any_json(),
    ]
}

fn message() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (
            prop::sample::select(vec!["system", "user", "assistant", "tool", ""]),
            odd_string()
        )
            .prop_map(|(r, c)| json!({"role": r, "content": c})),
        1 => odd_string().prop_map(|t| json!({"role": "user", "content": [{"type": "text", "text": t}]})),
        1 => any_json().prop_map(|c| json!({"role": "user", "content": c})),
        1 => any_json(),
    ]
}

/// Values for a field of `field_bounds.rs`: mostly within its bounds, often on them or just
/// past them, sometimes any number at all.
fn bounded(f: &NumericField) -> BoxedStrategy<Value> {
    let lo = f.lowest();
    let hi = f.max.unwrap_or(lo + 50.0);
    match f.kind {
        Kind::Integer => {
            let (lo, hi) = (lo as i64, hi as i64);
            prop_oneof![
                16 => (lo..=hi).prop_map(Value::from),
                2 => prop::sample::select(vec![lo, hi, lo - 1, hi + 1]).prop_map(Value::from),
                1 => any::<i64>().prop_map(Value::from),
                1 => odd_number(),
            ]
            .boxed()
        }
        Kind::Number => {
            let past = (hi - lo) / 10.0;
            let edges = vec![lo, hi, lo - 1e-6, hi + 1e-6, lo - past, hi + past];
            prop_oneof![
                16 => (lo..=hi).prop_map(Value::from),
                2 => prop::sample::select(edges).prop_map(Value::from),
                1 => odd_number(),
            ]
            .boxed()
        }
    }
}

/// A value for `field` (of the chat endpoint when `chat`): mostly plausible, sometimes
/// anything at all. The numeric fields' values come from their bounds in `field_bounds.rs`.
fn field(name: &'static str, chat: bool) -> BoxedStrategy<Value> {
    let int = |lo: i64, hi: i64| {
        prop_oneof![
            8 => (lo..hi).prop_map(Value::from),
            1 => any::<i64>().prop_map(Value::from),
            1 => odd_number(),
        ]
        .boxed()
    };
    let boolean = || any::<bool>().prop_map(Value::Bool).boxed();
    let numeric = SAMPLING_FIELDS
        .iter()
        .chain(if chat {
            CHAT_ONLY_FIELDS
        } else {
            COMPLETION_ONLY_FIELDS
        })
        .find(|f| f.name == name);
    let plausible: BoxedStrategy<Value> = match name {
        "prompt" => prompt().boxed(),
        "messages" => prop::collection::vec(message(), 0..4)
            .prop_map(Value::Array)
            .boxed(),
        "stop" => stop().boxed(),
        "stop_token_ids" | "tokens" => token_ids().boxed(),
        "model" => prop_oneof![4 => Just("tiny-model"), 2 => Just(""), 1 => Just("gpt-4")]
            .prop_map(Value::from)
            .boxed(),
        "logprobs" if chat => boolean(),
        "stream" | "echo" | "ignore_eos" | "add_generation_prompt" => boolean(),
        "stream_options" => any::<bool>()
            .prop_map(|b| json!({"include_usage": b}))
            .boxed(),
        "max_tokens" | "max_completion_tokens" => int(-2, 12),
        "seed" => int(-5, 1000),
        // Token ids (a few outside the vocabulary of 262) to biases.
        "logit_bias" => prop::collection::btree_map(
            prop_oneof![9 => 0i64..262, 1 => -2i64..100_000].prop_map(|id| id.to_string()),
            bounded(&LOGIT_BIAS),
            0..3,
        )
        .prop_map(|m| json!(m))
        .boxed(),
        _ => bounded(numeric.unwrap_or_else(|| panic!("no generator for `{name}`"))),
    };
    prop_oneof![30 => plausible, 1 => Just(Value::Null), 1 => any_json()].boxed()
}

/// The fields a body is made of: `others`, then the shared sampling fields of
/// `field_bounds.rs` and the endpoint's own (`only`).
fn fields(others: &[&'static str], only: &[NumericField]) -> Vec<&'static str> {
    let numeric = SAMPLING_FIELDS.iter().chain(only).map(|f| f.name);
    others.iter().copied().chain(numeric).collect()
}

fn completion_fields() -> Vec<&'static str> {
    fields(
        &[
            "model",
            "prompt",
            "max_tokens",
            "echo",
            "seed",
            "stop",
            "stop_token_ids",
            "ignore_eos",
            "stream",
            "stream_options",
        ],
        COMPLETION_ONLY_FIELDS,
    )
}

fn chat_fields() -> Vec<&'static str> {
    fields(
        &[
            "model",
            "messages",
            "max_tokens",
            "max_completion_tokens",
            "logprobs",
            "seed",
            "stop",
            "stop_token_ids",
            "ignore_eos",
            "stream",
            "stream_options",
        ],
        CHAT_ONLY_FIELDS,
    )
}

/// A request body: a random subset of `fields`, each with a generated value, plus (sometimes)
/// unknown fields. The prompt or messages are there most of the time.
fn body(fields: Vec<&'static str>) -> impl Strategy<Value = Value> {
    body_with(fields, 0.25)
}

/// `body`, each optional field present with probability `presence`.
fn body_with(fields: Vec<&'static str>, presence: f64) -> impl Strategy<Value = Value> {
    let chat = fields.contains(&"messages");
    let present = fields
        .iter()
        .map(|f| {
            let p = if matches!(*f, "prompt" | "messages") {
                0.9
            } else {
                presence
            };
            prop::bool::weighted(p)
        })
        .collect::<Vec<_>>();
    let values: Vec<BoxedStrategy<Value>> = fields.iter().map(|f| field(f, chat)).collect();
    let extra = prop::collection::btree_map("x_[a-z]{1,6}", any_json(), 0..3);
    (present, values, extra).prop_map(move |(present, values, extra)| {
        let mut m = Map::new();
        for ((name, keep), v) in fields.iter().zip(present).zip(values) {
            if keep {
                m.insert(name.to_string(), v);
            }
        }
        m.extend(extra);
        Value::Object(m)
    })
}

/// JSON text, sometimes corrupted: truncated, a byte changed, or bytes inserted.
fn corrupted(v: Value) -> impl Strategy<Value = Vec<u8>> {
    let text = serde_json::to_vec(&v).unwrap();
    let n = text.len();
    (0usize..4, 0..=n, any::<u8>(), "[\\[\\]{},:\"\\\\]{1,4}").prop_map(
        move |(how, at, byte, junk)| {
            let mut t = text.clone();
            match how {
                0 => t.truncate(at),
                1 if at < t.len() => t[at] = byte,
                2 => {
                    let at = at.min(t.len());
                    t.splice(at..at, junk.bytes());
                }
                _ => {}
            }
            t
        },
    )
}

// ------------------------------------------------------------------ properties

/// Everything the engine relies on about a validated request.
fn check_bounds(v: &ValidatedRequest, l: &Limits) {
    assert!(!v.prompt.is_empty(), "empty prompt passed");
    assert!(v.prompt.len() <= l.max_prompt_tokens);
    assert!(v.prompt.iter().all(|&t| (t as usize) < l.vocab_size));
    // 0 only echoes (and scores) the prompt; the engine still samples once and sends nothing.
    assert!(v.max_tokens >= 1 || v.echo.is_some());
    assert!(v.max_tokens <= l.max_tokens_cap);
    assert!(v.prompt.len() + v.max_tokens <= l.context_length);
    let p = &v.params;
    for (field, value) in [
        (TEMPERATURE, p.temperature),
        (TOP_P, p.top_p),
        (MIN_P, p.min_p),
        (REPETITION_PENALTY, p.repetition_penalty),
        (PRESENCE_PENALTY, p.presence_penalty),
        (FREQUENCY_PENALTY, p.frequency_penalty),
    ] {
        assert!(field.contains(value.into()), "{} = {value}", field.name);
    }
    assert!(p
        .logit_bias
        .iter()
        .all(|&(id, bias)| (id as usize) < l.vocab_size && LOGIT_BIAS.contains(bias.into())));
    assert!(N.contains(v.n as f64));
    assert!(v.stop_strings.len() <= l.max_stop_strings);
    assert!(v
        .stop_strings
        .iter()
        .all(|s| !s.is_empty() && s.len() <= l.max_stop_string_len));
    assert!(v
        .stop_token_ids
        .iter()
        .all(|&t| (t as usize) < l.vocab_size));
    assert!(v.logprobs.is_none_or(|n| LOGPROBS.contains(n as f64)));
    assert!(v
        .prompt_logprobs
        .is_none_or(|n| PROMPT_LOGPROBS.contains(n as f64)));
}

fn check_refusal(e: &ValidationError) {
    assert!(
        matches!(e.status(), StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND),
        "{e}"
    );
    let api = ApiError::from(e.clone());
    assert_eq!(api.status, e.status());
    assert!(!api.detail.message.is_empty());
}

/// Parses `bytes` as `T` the way the server does: Ok, or a 400 with a message.
fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    match axum::Json::<T>::from_bytes(bytes) {
        Ok(axum::Json(v)) => Some(v),
        Err(r) => {
            let e = ApiError::from_json_rejection(r);
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert!(!e.detail.message.is_empty());
            None
        }
    }
}

/// How a case ended, so each property can check its generator reaches every outcome.
#[derive(Default)]
struct Outcomes {
    unparsed: AtomicUsize,
    refused: AtomicUsize,
    accepted: AtomicUsize,
}

impl Outcomes {
    fn count(&self, outcome: Option<bool>) {
        match outcome {
            None => &self.unparsed,
            Some(false) => &self.refused,
            Some(true) => &self.accepted,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Each outcome happened in at least `pct` percent of the cases.
    fn assert_each_at_least(&self, pct: usize, what: &str) {
        let n = [&self.unparsed, &self.refused, &self.accepted].map(|a| a.load(Ordering::Relaxed));
        let total: usize = n.iter().sum();
        eprintln!(
            "{what}: {total} cases: {} not JSON of the API, {} refused, {} accepted",
            n[0], n[1], n[2]
        );
        for (k, name) in n.iter().zip(["unparsed", "refused", "accepted"]) {
            assert!(
                k * 100 >= pct * total,
                "{what}: only {k} of {total} cases {name}"
            );
        }
    }
}

/// None: not parsed; Some(false): refused by validation; Some(true): accepted.
fn validated_case<R: serde::de::DeserializeOwned>(
    bytes: &[u8],
    validate: fn(&R, &LoadedModel, &Limits) -> Result<ValidatedRequest, ValidationError>,
) -> Option<bool> {
    let req = parse::<R>(bytes)?;
    let l = limits();
    Some(match validate(&req, &fixture().model, &l) {
        Ok(v) => {
            check_bounds(&v, &l);
            true
        }
        Err(e) => {
            check_refusal(&e);
            false
        }
    })
}

fn completion_case(bytes: &[u8]) -> Option<bool> {
    validated_case::<CompletionRequest>(bytes, validation::completion)
}

fn chat_case(bytes: &[u8]) -> Option<bool> {
    validated_case::<ChatCompletionRequest>(bytes, validation::chat)
}

/// Runs generated bodies of `fields` through `case`; every outcome must occur at least once.
fn fuzz_bodies(fields: Vec<&'static str>, case: fn(&[u8]) -> Option<bool>, what: &str) {
    let outcomes = Outcomes::default();
    let mut runner = TestRunner::new(config(cases(10_000)));
    runner
        .run(&body(fields), |v| {
            outcomes.count(case(&serde_json::to_vec(&v).unwrap()));
            Ok(())
        })
        .unwrap();
    outcomes.assert_each_at_least(1, what);
}

#[test]
fn completion_bodies_parse_or_are_refused_and_validated_ones_are_in_bounds() {
    fuzz_bodies(completion_fields(), completion_case, "completions");
}

#[test]
fn chat_bodies_parse_or_are_refused_and_validated_ones_are_in_bounds() {
    fuzz_bodies(chat_fields(), chat_case, "chat");
}

#[test]
fn corrupted_and_arbitrary_bytes_never_panic() {
    let outcomes = Outcomes::default();
    let mut runner = TestRunner::new(config(cases(10_000)));
    let corrupt = body(completion_fields()).prop_flat_map(corrupted);
    runner
        .run(&corrupt, |bytes| {
            outcomes.count(completion_case(&bytes));
            chat_case(&bytes);
            let _ = parse::<TokenizeRequest>(&bytes);
            let _ = parse::<DetokenizeRequest>(&bytes);
            Ok(())
        })
        .unwrap();
    outcomes.assert_each_at_least(1, "corrupted completions");
    let mut runner = TestRunner::new(config(cases(5000)));
    runner
        .run(&prop::collection::vec(any::<u8>(), 0..256), |bytes| {
            completion_case(&bytes);
            chat_case(&bytes);
            Ok(())
        })
        .unwrap();
}

/// A router on a running engine (tiny model), with an API key.
fn app() -> axum::Router {
    let f = fixture();
    let mut args = ServeArgs::with_model("tiny-model.gguf");
    args.api_keys = vec![KEY.parse().unwrap()];
    let metrics = Arc::new(Metrics::new());
    let state = AppState::new(&args, metrics.clone());
    let mut cfg = args.to_engine_config();
    cfg.kv_cache_mb = 8;
    state.set_ready(
        Ready::start(Some(f.model.clone()), None, cfg, metrics, limits(), None).unwrap(),
    );
    router(state, Duration::from_secs(5))
}

#[test]
fn requests_through_the_router_never_get_a_5xx() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let app = rt.block_on(async { app() });
    let route = prop_oneof![
        Just("/v1/completions"),
        Just("/v1/chat/completions"),
        Just("/tokenize"),
        Just("/detokenize"),
    ];
    let routed_body = prop_oneof![
        4 => body_with(completion_fields(), 0.1).prop_map(|b| ("/v1/completions", b)),
        4 => body_with(chat_fields(), 0.1).prop_map(|b| ("/v1/chat/completions", b)),
        1 => body(vec!["prompt", "messages", "model", "add_generation_prompt"]).prop_map(|b| ("/tokenize", b)),
        1 => body(vec!["tokens", "model"]).prop_map(|b| ("/detokenize", b)),
        1 => (route, any_json()),
    ];
    let content_type = prop_oneof![
        12 => Just(Some("application/json")),
        1 => Just(None),
        1 => Just(Some("text/plain")),
    ];
    let key = prop_oneof![
        12 => Just(Some(format!("Bearer {KEY}"))),
        1 => Just(None),
        1 => "[ -~]{0,12}".prop_map(Some),
    ];
    let request = (routed_body, content_type, key);
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    let mut runner = TestRunner::new(config(cases(500)));
    runner
        .run(&request, |((path, body), ct, key)| {
            let mut req = Request::builder().method("POST").uri(path);
            if let Some(ct) = ct {
                req = req.header("content-type", ct);
            }
            if let Some(k) = &key {
                if axum::http::HeaderValue::from_str(k).is_ok() {
                    req = req.header("authorization", k.as_str());
                }
            }
            let req = req.body(Body::from(body.to_string())).unwrap();
            let (status, bytes) = rt.block_on(async {
                let resp = tokio::time::timeout(Duration::from_secs(30), app.clone().oneshot(req))
                    .await
                    .expect("an answer within 30 s")
                    .unwrap();
                let status = resp.status();
                let bytes = tokio::time::timeout(
                    Duration::from_secs(30),
                    axum::body::to_bytes(resp.into_body(), 1 << 24),
                )
                .await
                .expect("the whole body within 30 s")
                .unwrap();
                (status, bytes)
            });
            *statuses.lock().unwrap().entry(status.as_u16()).or_default() += 1;
            let text = String::from_utf8_lossy(&bytes);
            prop_assert!(status.as_u16() < 500, "{path} {body}: {status} {text}");
            prop_assert!(
                status != StatusCode::TOO_MANY_REQUESTS,
                "one request at a time never fills the queue"
            );
            if status.is_client_error() {
                let v: Value = serde_json::from_slice(&bytes).expect("error JSON");
                prop_assert!(v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()));
            } else if text.starts_with("data: ") {
                prop_assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
                prop_assert!(!text.contains("\"error\""), "{text}");
            } else {
                let _: Value = serde_json::from_slice(&bytes).expect("JSON answer");
            }
            Ok(())
        })
        .unwrap();
    let statuses = statuses.into_inner().unwrap();
    eprintln!("statuses through the router: {statuses:?}");
    for status in [200, 400, 401] {
        assert!(
            statuses.contains_key(&status),
            "no {status} in {statuses:?}"
        );
    }
}
