//! POST /v1/completions: text in, text out, in OpenAI's legacy completions shape.

use crate::generation::Chunk;
use crate::json::ApiJson;
use crate::logprobs::CompletionLogprobsBuilder;
use crate::openai_types::{
    unix_now, CompletionChoice, CompletionRequest, CompletionResponse, Usage,
};
use crate::routes::admit;
use crate::sse::{sse_response, StreamFormat};
use crate::state::AppState;
use crate::{error::ApiError, validation};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use braid_model::LoadedModel;
use std::sync::Arc;

pub async fn completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let a = admit(&state, req, validation::completion, "completions").await?;
    let mut format = CompletionFormat {
        id: state.response_id("cmpl", a.generation.id),
        created: unix_now(),
        model_name: state.served_model_name.clone(),
        model: a.model,
        logprobs: a.logprobs.then(CompletionLogprobsBuilder::default),
        include_usage: a.include_usage,
    };
    if a.stream {
        let metrics = state.metrics.clone();
        return Ok(sse_response(a.generation, format, a.include_usage, metrics));
    }
    let out = a.generation.collect().await?;
    let logprobs = format.logprobs.as_mut().map(|b| {
        b.build(
            &format.model.tokenizer,
            out.prompt_scored.iter().chain(&out.tokens),
        )
    });
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
            .filter(|_| chunk.token.is_some() || !chunk.prompt_scored.is_empty())
            .map(|b| b.build(tokenizer, chunk.prompt_scored.iter().chain(&chunk.token)));
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
