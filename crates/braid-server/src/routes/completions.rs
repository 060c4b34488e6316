//! POST /v1/completions: text in, text out, in OpenAI's legacy completions shape.

use crate::generation::{Chunk, Generation};
use crate::json::ApiJson;
use crate::logprobs::CompletionLogprobsBuilder;
use crate::openai_types::{
    unix_now, CompletionChoice, CompletionRequest, CompletionResponse, Usage,
};
use crate::routes::blocking;
use crate::sse::{sse_response, StreamFormat};
use crate::state::AppState;
use crate::{error::ApiError, validation};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use braid_model::LoadedModel;
use std::sync::Arc;
use std::time::Instant;

pub async fn completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let arrival = Instant::now();
    let ready = state.ready()?;
    let (model, limits) = (ready.model.clone(), ready.limits.clone());
    let valid = blocking(move || validation::completion(&req, &model, &limits)).await??;
    let (stream, include_usage, logprobs) =
        (valid.stream, valid.include_usage, valid.logprobs.is_some());
    let generation = Generation::start(&state, ready, valid, arrival, "completions")?;
    let mut format = CompletionFormat {
        id: state.response_id("cmpl", generation.id),
        created: unix_now(),
        model_name: state.served_model_name.clone(),
        model: ready.model.clone(),
        logprobs: logprobs.then(CompletionLogprobsBuilder::default),
        include_usage,
    };
    if stream {
        return Ok(sse_response(
            generation,
            format,
            include_usage,
            state.metrics.clone(),
        ));
    }
    let out = generation.collect().await?;
    let logprobs = format
        .logprobs
        .as_mut()
        .map(|b| b.build(&format.model.tokenizer, &out.tokens));
    let choice = CompletionChoice {
        index: 0,
        text: out.text,
        logprobs,
        finish_reason: Some(out.finish.as_str()),
    };
    Ok(axum::Json(format.response(vec![choice], Some(Some(out.usage)))).into_response())
}

struct CompletionFormat {
    id: String,
    created: u64,
    model_name: String,
    model: Arc<LoadedModel>,
    logprobs: Option<CompletionLogprobsBuilder>,
    include_usage: bool,
}

impl CompletionFormat {
    fn response(
        &self,
        choices: Vec<CompletionChoice>,
        usage: Option<Option<Usage>>,
    ) -> CompletionResponse {
        CompletionResponse {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model_name.clone(),
            choices,
            usage,
        }
    }
}

impl StreamFormat for CompletionFormat {
    type Json = CompletionResponse;

    fn chunk(&mut self, chunk: Chunk) -> CompletionResponse {
        let tokenizer = &self.model.tokenizer;
        let logprobs = self
            .logprobs
            .as_mut()
            .filter(|_| chunk.token.is_some())
            .map(|b| b.build(tokenizer, chunk.token.as_slice()));
        let choice = CompletionChoice {
            index: 0,
            text: chunk.text,
            logprobs,
            finish_reason: chunk.finish.map(|f| f.as_str()),
        };
        self.response(vec![choice], self.include_usage.then_some(None))
    }

    fn usage(&mut self, usage: Usage) -> CompletionResponse {
        self.response(vec![], Some(Some(usage)))
    }
}
