//! The endpoints routers call on a worker, under SGLang's names, which vllm-router keeps:
//! GET /get_load (its `power_of_two` policy polls it), GET /get_server_info (its `kv_aware`
//! policy reads the model id and the KV block size there), GET /get_model_info,
//! GET /health_generate (health that proves the model answers) and POST /flush_cache (the
//! router sends it to every worker); and GET /kv_event_sources, where vllm-router finds a
//! worker's KV-cache events.

use crate::error::ApiError;
use crate::openai_types::CompletionRequest;
use crate::request_origin::RequestOrigin;
use crate::routes::admit;
use crate::state::AppState;
use crate::validation;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::{json, Value};

/// `load`: requests running or waiting, the one number the router compares.
pub async fn get_load(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let stats = state.ready()?.engine.stats();
    Ok(Json(json!({
        "load": stats.running + stats.waiting,
        "num_running": stats.running,
        "num_waiting": stats.waiting,
        "kv_cache_usage": stats.kv_usage,
    })))
}

pub async fn get_server_info(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let ready = state.ready()?;
    let limits = &ready.limits;
    Ok(Json(json!({
        "model_id": state.served_model_name,
        "served_model_name": state.served_model_name,
        "kv_block_size": ready.engine.block_size(),
        "max_model_len": limits.context_length,
        "max_total_num_tokens": ready.engine.pool_tokens(),
        "version": env!("CARGO_PKG_VERSION"),
    })))
}

pub async fn get_model_info(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state.ready()?;
    Ok(Json(json!({
        "model_path": state.served_model_name,
        "tokenizer_path": state.served_model_name,
        "is_generation": true,
    })))
}

/// 200 once the model has written a token for a one-token request; the request's error
/// otherwise (503 while loading or draining).
pub async fn health_generate(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let probe: CompletionRequest = serde_json::from_value(json!({
        "prompt": "Hello", "max_tokens": 1, "temperature": 0
    }))
    .expect("the probe is a completion request");
    let origin = RequestOrigin::of("health_generate", &headers);
    let admitted = admit(&state, probe, validation::completion, &origin).await?;
    for generation in admitted.generations {
        generation.collect().await?;
    }
    Ok(Json(json!({"status": "ok"})))
}

/// Drops every prefix-cache block no request holds (SGLang's and vllm-router's call takes no
/// body).
pub async fn flush_cache(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let ready = state.ready()?;
    let dropped = ready
        .engine
        .flush_prefix_cache()
        .await
        .ok_or_else(|| ApiError::internal("the engine has stopped"))?;
    Ok(Json(json!({"status": "ok", "dropped_blocks": dropped})))
}

/// GET /kv_event_sources: where a router subscribes (vllm-router's discovery reads this when
/// it is not told `--kv-event-source`); 404 without `--kv-events`.
pub async fn kv_event_sources(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let ready = state.ready()?;
    let publisher = ready.kv_events.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "this server publishes no KV-cache events; start it with --kv-events tcp://HOST:PORT",
        )
        .with_code("kv_events_off")
    })?;
    Ok(Json(json!({
        "0": {
            "endpoint": publisher.endpoint,
            "replay_endpoint": null,
            "topic": publisher.topic,
            "hwm": 100000,
            "publisher": "zmq",
            "encoding": "msgpack",
            "schema_version": 1,
            "enable_kv_cache_events": true,
        }
    })))
}
