//! POST /v1/completions/render and /v1/chat/completions/render (vLLM's): the prompt a
//! generation request would read, as token ids, without generating.
//!
//! A router that routes on cache contents (vllm-router's `cache_aware` and `kv_aware`) asks
//! each worker for these on every request, so the ids must be exactly what the request
//! itself would be read as: the body goes through the same validation as the generation
//! endpoint's, and a request that would be refused there is refused here with the same error.

use crate::error::ApiError;
use crate::json_body::ApiJson;
use crate::openai_types::{ChatCompletionRequest, CompletionRequest, RenderedRequest};
use crate::routes::validated;
use crate::state::AppState;
use crate::validation::{self, ValidatedRequest};
use axum::extract::State;
use axum::Json;
use braid_model::LoadedModel;
use serde_json::json;

/// One rendered request per prompt of `prompt`, in order.
pub async fn render_completion(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Json<Vec<RenderedRequest>>, ApiError> {
    let (valid, ready) = validated(&state, req, validation::completion).await?;
    let model = ready.generator()?;
    let first = valid.prompt.clone();
    let prompts = std::iter::once(first).chain(valid.more_prompts.iter().map(|(p, _)| p.clone()));
    let rendered = prompts
        .map(|ids| {
            let id = state.response_id("cmpl", ready.engine.next_request_id());
            rendered(id, ids, &valid, model, &state.served_model_name)
        })
        .collect();
    Ok(Json(rendered))
}

/// The conversation rendered with the chat template, as one request.
pub async fn render_chat(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatCompletionRequest>,
) -> Result<Json<RenderedRequest>, ApiError> {
    let (valid, ready) = validated(&state, req, validation::chat).await?;
    let id = state.response_id("chatcmpl", ready.engine.next_request_id());
    let ids = valid.prompt.clone();
    Ok(Json(rendered(
        id,
        ids,
        &valid,
        ready.generator()?,
        &state.served_model_name,
    )))
}

fn rendered(
    request_id: String,
    token_ids: Vec<u32>,
    valid: &ValidatedRequest,
    model: &LoadedModel,
    served: &str,
) -> RenderedRequest {
    let p = &valid.params;
    RenderedRequest {
        request_id,
        prompt: model.tokenizer.decode(&token_ids, false),
        token_ids,
        features: None,
        sampling_params: json!({
            "n": valid.n,
            "max_tokens": valid.max_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "top_k": if p.top_k == 0 { -1 } else { p.top_k as i64 },
            "min_p": p.min_p,
            "seed": p.seed,
            "presence_penalty": p.presence_penalty,
            "frequency_penalty": p.frequency_penalty,
            "repetition_penalty": p.repetition_penalty,
            "stop": valid.stop_strings,
            "stop_token_ids": valid.stop_token_ids,
            "include_stop_str_in_output": valid.keep_stop_string,
            "skip_special_tokens": valid.skip_special_tokens,
            "logprobs": valid.logprobs,
            "prompt_logprobs": valid.prompt_logprobs,
        }),
        model: served.to_string(),
        stream: valid.stream,
        stream_options: None,
        cache_salt: None,
        priority: 0,
        kv_transfer_params: None,
    }
}
