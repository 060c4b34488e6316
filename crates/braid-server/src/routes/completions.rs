//! POST /v1/completions: text in, text out, in OpenAI's legacy completions shape.

use crate::generation::Chunk;
use crate::json_body::ApiJson;
use crate::logprobs::{prompt_logprobs, CompletionLogprobsBuilder};
use crate::openai_types::{
    unix_now, CompletionChoice, CompletionRequest, CompletionResponse, Usage,
};
use crate::request_origin::RequestOrigin;
use crate::routes::{admit, Answer};
use crate::sse::StreamFormat;
use crate::state::AppState;
use crate::{error::ApiError, validation};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use braid_model::LoadedModel;
use std::sync::Arc;

pub async fn completions(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let origin = RequestOrigin::of("completions", &headers);
    let a = admit(&state, req, validation::completion, &origin).await?;
    let choices = a.generations.len();
    let format = CompletionFormat {
        id: state.response_id("cmpl", a.generations[0].id),
        created: unix_now(),
        model_name: state.served_model_name.clone(),
        model: a.model.clone(),
        logprobs: a.logprobs.then(|| {
            (0..choices)
                .map(|_| CompletionLogprobsBuilder::default())
                .collect()
        }),
        include_usage: a.include_usage,
        echo: a.echo,
    };
    let prompt_top = a.prompt_logprobs;
    let (outs, usage, mut format) = match a.answer(&state, format).await? {
        Answer::Stream(response) => return Ok(response),
        Answer::Whole(choices, usage, format) => (choices, usage, format),
    };
    let choices = outs
        .into_iter()
        .enumerate()
        .map(|(index, out)| {
            let echoed = out.prompt_scored.iter().filter(|_| format.echo);
            let logprobs = format
                .logprobs
                .as_mut()
                .map(|b| b[index].build(&format.model.tokenizer, echoed.chain(&out.tokens)));
            CompletionChoice {
                index,
                text: out.text,
                logprobs,
                finish_reason: Some(out.finish.as_str()),
                prompt_logprobs: prompt_top
                    .map(|top| prompt_logprobs(&format.model.tokenizer, &out.prompt_scored, top)),
            }
        })
        .collect();
    Ok(axum::Json(format.response(choices, Some(Some(usage)))).into_response())
}

struct CompletionFormat {
    id: String,
    created: u64,
    model_name: String,
    model: Arc<LoadedModel>,
    /// One builder per choice (text offsets run on within a choice).
    logprobs: Option<Vec<CompletionLogprobsBuilder>>,
    include_usage: bool,
    /// The prompt's scores go in front of the output's in `logprobs`.
    echo: bool,
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

    fn chunk(&mut self, index: usize, chunk: Chunk) -> Option<CompletionResponse> {
        let tokenizer = &self.model.tokenizer;
        let echoed = chunk.prompt_scored.iter().filter(|_| self.echo);
        let logprobs = self
            .logprobs
            .as_mut()
            .filter(|_| chunk.token.is_some() || (self.echo && !chunk.prompt_scored.is_empty()))
            .map(|b| b[index].build(tokenizer, echoed.chain(&chunk.token)));
        let choice = CompletionChoice {
            index,
            text: chunk.text,
            logprobs,
            finish_reason: chunk.finish.map(|f| f.as_str()),
            prompt_logprobs: None,
        };
        Some(self.response(vec![choice], self.include_usage.then_some(None)))
    }

    fn usage(&mut self, usage: Usage) -> CompletionResponse {
        self.response(vec![], Some(Some(usage)))
    }
}
