//! POST /v1/embeddings: texts in, one vector each out, in OpenAI's shape (with vLLM's
//! `truncate_prompt_tokens`).
//!
//! The texts are tokenized and checked off the async workers, then handed to the engine,
//! whose steps run them beside the generation model's work under the same latency target.
//! The handler only waits for the answer; a client that leaves drops the wait, and the engine
//! forgets the texts it had not run yet.

use crate::error::ApiError;
use crate::json_body::ApiJson;
use crate::openai_types::{
    unix_now, EmbeddingData, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, EmbeddingVector,
};
use crate::request_origin::RequestOrigin;
use crate::routes::blocking;
use crate::state::AppState;
use crate::validation::{self, Encoding, PooledModel};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Json;
use base64::Engine as _;
use braid_engine::{EmbedRequest, EmbeddingModel};
use std::time::Instant;

pub async fn embeddings(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<EmbeddingRequest>,
) -> Result<Json<EmbeddingResponse>, ApiError> {
    let arrival = Instant::now();
    let origin = RequestOrigin::of("embeddings", &headers);
    let ready = state.ready()?;
    let target = validation::check_embedding_model(
        req.model.as_deref(),
        ready.embedder.as_deref(),
        ready.pooling,
        &ready.limits,
    )?;
    let limits = ready.limits.clone();
    let (valid, model_id) = match target {
        EmbeddingModel::Sentence => {
            let embedder = ready
                .embedder
                .clone()
                .expect("checked: a sentence model is served");
            let id = embedder.id().to_string();
            let valid = blocking(&state, move || {
                validation::embedding(&req, &*embedder, &limits)
            });
            (valid.await??, id)
        }
        EmbeddingModel::Generation => {
            let model = ready.generator()?.clone();
            let id = state.served_model_name.clone();
            let served = id.clone();
            let valid = blocking(&state, move || {
                // The scheduler admits a prompt with room for one token after it, which an
                // embedding never samples.
                let max_tokens = limits.max_prompt_tokens.min(limits.context_length - 1);
                let pooled = PooledModel {
                    model: &model,
                    id: &served,
                    max_tokens,
                };
                validation::embedding(&req, &pooled, &limits)
            });
            (valid.await??, id)
        }
    };
    let prompt_tokens = valid.prompt_tokens();
    let texts = valid.texts.len();
    let id = ready.engine.next_request_id();
    let span = tracing::info_span!("embedding", id, request_id = %origin.request_id);
    let (answer, answered) = tokio::sync::oneshot::channel();
    ready.engine.embed(EmbedRequest {
        id,
        model: target,
        texts: valid.texts,
        arrival,
        answer,
        span: span.clone(),
    })?;
    // Past the deadline the answer's receiver is dropped, which tells the engine to forget
    // the request's texts still waiting.
    let deadline = tokio::time::Instant::from_std(arrival + state.request_timeout);
    let embedded = tokio::time::timeout_at(deadline, answered)
        .await
        .map_err(|_| {
            tracing::info!(parent: &span, texts, "embedding request reached its deadline");
            ApiError::timeout(state.request_timeout)
        })?
        .map_err(|_| ApiError::internal("the inference engine stopped".to_string()))?
        .map_err(|e| ApiError::internal(format!("embedding failed: {e}")))?;
    tracing::info!(
        parent: &span,
        texts,
        prompt_tokens,
        queue_secs = embedded.queue_secs,
        e2e_secs = arrival.elapsed().as_secs_f64(),
        "embedding request finished"
    );
    let data = embedded
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| EmbeddingData {
            object: "embedding",
            index,
            embedding: encode(v, valid.encoding),
        })
        .collect();
    Ok(Json(EmbeddingResponse {
        object: "list",
        id: state.response_id("embd", id),
        created: unix_now(),
        model: model_id,
        data,
        usage: EmbeddingUsage {
            prompt_tokens,
            total_tokens: prompt_tokens,
        },
    }))
}

fn encode(v: Vec<f32>, encoding: Encoding) -> EmbeddingVector {
    match encoding {
        Encoding::Float => EmbeddingVector::Float(v),
        Encoding::Base64 => {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            EmbeddingVector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
    }
}
