//! The OpenAI-compatible API on a real server (tiny model): response shapes, streaming,
//! stop strings, limits, and the side endpoints.

mod common;
mod shared_server;

use common::{start, TestServer, MODEL_NAME};
use serde_json::{json, Value};

/// The server these tests share: none of them stops it or needs its counters to itself.
fn server() -> &'static TestServer {
    shared_server::shared_server(|_| {})
}

fn parse(chunks: &[String]) -> (Vec<Value>, bool) {
    let done = chunks.last().map(String::as_str) == Some("[DONE]");
    let body = if done {
        &chunks[..chunks.len() - 1]
    } else {
        chunks
    };
    (
        body.iter()
            .map(|c| serde_json::from_str(c).unwrap_or_else(|e| panic!("chunk {c}: {e}")))
            .collect(),
        done,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_has_openai_shape_and_usage() {
    let s = server();
    let (status, body) = s
        .post(
            "/v1/completions",
            json!({"model": MODEL_NAME, "prompt": "hello", "max_tokens": 5, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(body["object"], "text_completion");
    assert!(body["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(body["model"], MODEL_NAME);
    let choice = &body["choices"][0];
    assert_eq!(choice["index"], 0);
    assert!(choice["text"].is_string());
    assert!(choice["logprobs"].is_null());
    assert_eq!(choice["finish_reason"], "length");
    let prompt_tokens = body["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        prompt_tokens, 4,
        "\"hello\" is \"he\" + 3 byte tokens in the tiny vocabulary: {body}"
    );
    assert_eq!(body["usage"]["completion_tokens"], 5);
    assert_eq!(body["usage"]["total_tokens"], prompt_tokens + 5);

    // `model` may be omitted; token-id prompts work.
    let (status, body) = s
        .post(
            "/v1/completions",
            json!({"prompt": [104, 105], "max_tokens": 3, "ignore_eos": true, "temperature": 0}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_completion_ends_with_usage_and_done() {
    let s = server();
    let req = json!({"prompt": "hello", "max_tokens": 6, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}, "temperature": 0});
    let (status, chunks) = s.stream("/v1/completions", req).await;
    assert_eq!(status, 200);
    let (events, done) = parse(&chunks);
    assert!(done, "the stream must end with [DONE]: {chunks:?}");
    let (usage_chunk, token_chunks) = events.split_last().unwrap();
    assert_eq!(usage_chunk["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 6);
    assert_eq!(
        token_chunks.len(),
        6,
        "one chunk per token: {token_chunks:?}"
    );
    for c in token_chunks {
        assert_eq!(c["object"], "text_completion");
        assert!(c["id"].as_str().unwrap().starts_with("cmpl-"));
        assert!(c["usage"].is_null(), "usage is null until the last chunk");
    }
    assert!(token_chunks[..5]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));
    assert_eq!(token_chunks[5]["choices"][0]["finish_reason"], "length");
    let streamed: String = token_chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();

    // The same greedy request without streaming gives the same text.
    let (_, body) = s
        .post(
            "/v1/completions",
            json!({"prompt": "hello", "max_tokens": 6, "ignore_eos": true, "temperature": 0}),
        )
        .await;
    assert_eq!(body["choices"][0]["text"].as_str().unwrap(), streamed);

    // Without include_usage there is no usage field at all.
    let (_, chunks) = s
        .stream(
            "/v1/completions",
            json!({"prompt": "hi", "max_tokens": 2, "stream": true, "ignore_eos": true}),
        )
        .await;
    let (events, done) = parse(&chunks);
    assert!(done);
    assert!(
        events.iter().all(|e| e.get("usage").is_none()),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completion_and_stream() {
    let s = server();
    let messages = json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]);
    let (status, body) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": messages, "max_tokens": 4, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert!(body["choices"][0]["message"]["content"].is_string());
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 4);

    let req = json!({"messages": messages, "max_completion_tokens": 3, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}});
    let (status, chunks) = s.stream("/v1/chat/completions", req).await;
    assert_eq!(status, 200);
    let (events, done) = parse(&chunks);
    assert!(done);
    assert!(events
        .iter()
        .all(|e| e["object"] == "chat.completion.chunk"));
    assert_eq!(
        events[0]["choices"][0]["delta"]["role"], "assistant",
        "the first delta carries the role: {:?}",
        events[0]
    );
    assert!(events[1..].iter().all(|e| e["choices"]
        .get(0)
        .is_none_or(|c| c["delta"].get("role").is_none())));
    let last = events.last().unwrap();
    assert_eq!(last["choices"].as_array().unwrap().len(), 0);
    assert_eq!(last["usage"]["completion_tokens"], 3);
    assert_eq!(
        events[events.len() - 2]["choices"][0]["finish_reason"],
        "length"
    );
}

/// Greedy text and per-token texts of `prompt`, via legacy logprobs.
async fn greedy(s: &common::TestServer, prompt: &str, max_tokens: u32) -> (String, Vec<String>) {
    let (status, body) = s.post("/v1/completions", json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true, "logprobs": 0})).await;
    assert_eq!(status, 200, "{body}");
    let tokens = body["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    (
        body["choices"][0]["text"].as_str().unwrap().to_string(),
        tokens,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_string_spanning_tokens_cuts_the_text() {
    let s = server();
    let (text, tokens) = greedy(s, "the cat", 60).await;
    assert_eq!(tokens.len(), 60);
    // Two neighbouring tokens of plain printable ASCII: the stop string is the last character
    // of one and the first of the next, so it can only match across the boundary.
    // (Tokens that are part of a character are listed as "bytes:\\xNN"; they are not plain.)
    let plain = |t: &str| {
        !t.is_empty()
            && !t.starts_with("bytes:")
            && t.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
    };
    let i = (0..tokens.len() - 1)
        .find(|&i| plain(&tokens[i]) && plain(&tokens[i + 1]))
        .expect("two adjacent ASCII tokens in the greedy output");
    let stop = format!(
        "{}{}",
        tokens[i].chars().last().unwrap(),
        tokens[i + 1].chars().next().unwrap()
    );
    let cut = text.find(&stop).unwrap();
    let expected = &text[..cut];

    let req = json!({"prompt": "the cat", "max_tokens": 60, "temperature": 0, "ignore_eos": true, "stop": [stop.clone(), "\u{1}never"]});
    let (status, body) = s.post("/v1/completions", req.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["text"], expected,
        "stop {stop:?} in {text:?}"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() < 60);

    let mut streaming = req;
    streaming["stream"] = json!(true);
    let (_, chunks) = s.stream("/v1/completions", streaming).await;
    let (events, done) = parse(&chunks);
    assert!(done);
    let streamed: String = events
        .iter()
        .map(|e| e["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, expected);
    assert_eq!(
        events.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_and_echo_shapes() {
    let s = server();
    let (status, body) = s
        .post(
            "/v1/completions",
            json!({"prompt": "ab", "max_tokens": 3, "logprobs": 2, "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let lp = &body["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 3);
    assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 3);
    assert!(lp["token_logprobs"][0].as_f64().unwrap() <= 0.0);
    assert!(lp["top_logprobs"][0].as_object().unwrap().len() >= 2);
    assert_eq!(lp["text_offset"][0], 0);

    let req = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "logprobs": true, "top_logprobs": 3, "ignore_eos": true});
    let (status, body) = s.post("/v1/chat/completions", req).await;
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap();
    assert_eq!(content.len(), 2);
    assert!(
        content[0]["token"].is_string()
            && content[0]["bytes"].is_array()
            && content[0]["logprob"].is_number()
    );
    assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 3);

    let (_, body) = s
        .post(
            "/v1/completions",
            json!({"prompt": "echo me", "max_tokens": 2, "echo": true, "ignore_eos": true}),
        )
        .await;
    assert!(
        body["choices"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("echo me"),
        "{body}"
    );
}

/// A prompt scored with `echo` + `logprobs` gives each token the logprob it had when the model
/// generated it, which is how lm-evaluation-harness scores a continuation: the same bits each
/// time it is scored, and within bf16's rounding of generation's (a scored prompt is computed
/// in f32 throughout; generation read its own prompt's rows in bf16).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_with_logprobs_scores_the_prompt_as_generation_did() {
    let s = server();
    let ids = |body: &Value| -> Vec<u64> {
        body["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect()
    };
    let (_, prompt) = s
        .post(
            "/tokenize",
            json!({"prompt": "abc", "add_special_tokens": false}),
        )
        .await;
    let (_, b) = s
        .post(
            "/tokenize",
            json!({"prompt": "b", "add_special_tokens": false}),
        )
        .await;
    let (prompt, b) = (ids(&prompt), ids(&b)[0]);
    // The bias makes the continuation known (six `b`s); the logprobs reported stay the model's.
    let (status, generated) = s
        .post(
            "/v1/completions",
            json!({"prompt": prompt, "max_tokens": 6, "logprobs": 1, "ignore_eos": true,
                   "temperature": 0, "logit_bias": {b.to_string(): 100}}),
        )
        .await;
    assert_eq!(status, 200, "{generated}");
    let gen = &generated["choices"][0]["logprobs"];
    let mut scored_prompt = prompt.clone();
    scored_prompt.extend([b; 6]);
    let mut scorings = Vec::new();
    for max_tokens in [0, 1] {
        let (status, body) = s
            .post(
                "/v1/completions",
                json!({"prompt": scored_prompt, "max_tokens": max_tokens, "echo": true,
                       "logprobs": 1, "ignore_eos": true, "temperature": 0}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["usage"]["completion_tokens"], max_tokens);
        let lp = &body["choices"][0]["logprobs"];
        assert_eq!(
            lp["tokens"].as_array().unwrap().len(),
            scored_prompt.len() + max_tokens
        );
        assert!(
            lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null(),
            "{lp}"
        );
        for i in 0..6 {
            let at = prompt.len() + i;
            let (scored, sampled) = (
                lp["token_logprobs"][at].as_f64().unwrap(),
                gen["token_logprobs"][i].as_f64().unwrap(),
            );
            assert_eq!(lp["tokens"][at], gen["tokens"][i]);
            // Generation reads the prompt's attention in bf16, scoring in f32: 8 bits kept, so
            // a logprob moves by up to a few hundredths of its size (the bias forces the first
            // token from 12 nats down, where bf16 moved it by 0.26).
            assert!(
                (scored - sampled).abs() < 0.25f64.max(0.03 * sampled.abs()),
                "token {i}: scored {scored}, generated {sampled}"
            );
            let top = lp["top_logprobs"][at].as_object().unwrap();
            assert_eq!(top[lp["tokens"][at].as_str().unwrap()], scored);
            assert!(top.values().all(|v| v.as_f64().unwrap() <= 0.0));
        }
        scorings.push(lp["token_logprobs"].as_array().unwrap()[..scored_prompt.len()].to_vec());
    }
    assert_eq!(scorings[0], scorings[1], "the same prompt scored twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_200_status_ok() {
    let (status, body) = server().get("/health").await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_the_served_model_with_its_context_length() {
    let (status, body) = server().get("/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], MODEL_NAME);
    assert_eq!(models["data"][0]["object"], "model");
    assert_eq!(models["data"][0]["owned_by"], "braid");
    assert_eq!(models["data"][0]["max_model_len"], 512);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_model_is_200_by_id_and_another_id_is_404() {
    let s = server();
    assert_eq!(s.get(&format!("/v1/models/{MODEL_NAME}")).await.0, 200);
    assert_eq!(s.get("/v1/models/other").await.0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_has_queue_kv_cache_and_first_token_series_after_a_request() {
    let s = server();
    let _ = s
        .post("/v1/completions", json!({"prompt": "a", "max_tokens": 2}))
        .await;
    let (status, text) = s.get("/metrics").await;
    assert_eq!(status, 200);
    for name in [
        "braid_num_requests_running",
        "braid_num_requests_waiting",
        "braid_kv_cache_usage_perc",
        "braid_time_to_first_token_seconds",
    ] {
        assert!(text.contains(name), "/metrics lacks {name}");
    }
    let kernel = braid_kernels::active().name();
    let build_info = text
        .lines()
        .find(|l| l.starts_with("braid_build_info{"))
        .expect("/metrics lacks braid_build_info");
    assert!(
        build_info.contains(&format!("kernel=\"{kernel}\"")) && build_info.ends_with(" 1"),
        "{build_info}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_counts_its_tokens_and_detokenize_gives_the_text_back() {
    let s = server();
    let (status, body) = s.post("/tokenize", json!({"prompt": "hello there"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["max_model_len"], 512);
    let tokens = body["tokens"].clone();
    assert_eq!(
        body["count"].as_u64().unwrap() as usize,
        tokens.as_array().unwrap().len()
    );
    let (status, body) = s.post("/detokenize", json!({"tokens": tokens})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["prompt"], "hello there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_takes_chat_messages_through_the_template() {
    let (status, body) = server()
        .post(
            "/tokenize",
            json!({"messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["count"].as_u64().unwrap() > 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detokenize_of_a_token_outside_the_vocabulary_is_400() {
    let (status, body) = server().post("/detokenize", json!({"tokens": [999]})).await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_ends_with_length_and_chat_default_fits_the_context() {
    let s = server();
    let (_, body) = s
        .post(
            "/v1/completions",
            json!({"prompt": "a", "max_tokens": 1, "ignore_eos": true}),
        )
        .await;
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 1);
    // Chat without max_tokens may run to the end of the context: 512 - prompt tokens.
    let (status, body) = s
        .post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "ignore_eos": true}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let usage = &body["usage"];
    assert_eq!(usage["total_tokens"], 512, "{usage}");
}

/// On a server of its own, since it stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_has_served_shuts_down_cleanly() {
    let s = start().await;
    let (status, body) = s
        .post("/v1/completions", json!({"prompt": "a", "max_tokens": 2}))
        .await;
    assert_eq!(status, 200, "{body}");
    s.shutdown().await;
}
