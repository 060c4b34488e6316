//! POST /v1/chat/completions: messages rendered with the model's chat template, the answer
//! as an assistant message (or, streaming, deltas whose first one carries the role).

use crate::generation::Chunk;
use crate::json::ApiJson;
use crate::logprobs::chat_logprobs;
use crate::openai_types::{
    unix_now, ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatMessageOut, Usage,
};
use crate::routes::{admit, Answer};
use crate::sse::StreamFormat;
use crate::state::AppState;
use crate::{error::ApiError, validation};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use braid_model::LoadedModel;
use std::sync::Arc;

pub async fn chat_completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let a = admit(&state, req, validation::chat, "chat").await?;
    let format = ChatFormat {
        id: state.response_id("chatcmpl", a.generations[0].id),
        created: unix_now(),
        model_name: state.served_model_name.clone(),
        model: a.model.clone(),
        logprobs: a.logprobs,
        include_usage: a.include_usage,
    };
    let (outs, usage, format) = match a.answer(&state, format).await? {
        Answer::Stream(response) => return Ok(response),
        Answer::Whole(choices, usage, format) => (choices, usage, format),
    };
    let choices = outs
        .into_iter()
        .enumerate()
        .map(|(index, out)| ChatChoice {
            index,
            logprobs: format
                .logprobs
                .then(|| chat_logprobs(&format.model.tokenizer, &out.tokens)),
            message: ChatMessageOut {
                role: "assistant",
                content: out.text,
            },
            finish_reason: Some(out.finish.as_str()),
        })
        .collect();
    Ok(axum::Json(ChatCompletionResponse {
        id: format.id,
        object: "chat.completion",
        created: format.created,
        model: format.model_name,
        choices,
        usage,
    })
    .into_response())
}

struct ChatFormat {
    id: String,
    created: u64,
    model_name: String,
    model: Arc<LoadedModel>,
    logprobs: bool,
    include_usage: bool,
}

impl ChatFormat {
    fn chunk_of(
        &self,
        choices: Vec<ChatChunkChoice>,
        usage: Option<Option<Usage>>,
    ) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model_name.clone(),
            choices,
            usage,
        }
    }

    fn null_usage(&self) -> Option<Option<Usage>> {
        self.include_usage.then_some(None)
    }
}

impl StreamFormat for ChatFormat {
    type Json = ChatCompletionChunk;

    fn opening(&mut self, choices: usize) -> Option<ChatCompletionChunk> {
        let choices = (0..choices)
            .map(|index| ChatChunkChoice {
                index,
                delta: ChatDelta {
                    role: Some("assistant"),
                    content: Some(String::new()),
                },
                logprobs: None,
                finish_reason: None,
            })
            .collect();
        Some(self.chunk_of(choices, self.null_usage()))
    }

    fn chunk(&mut self, index: usize, chunk: Chunk) -> ChatCompletionChunk {
        let logprobs = (self.logprobs && chunk.token.is_some())
            .then(|| chat_logprobs(&self.model.tokenizer, chunk.token.as_slice()));
        // The closing chunk of a generation that ended on a stop token has no new text: an empty delta.
        let content = (chunk.finish.is_none() || !chunk.text.is_empty() || chunk.token.is_some())
            .then_some(chunk.text);
        let choice = ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content,
            },
            logprobs,
            finish_reason: chunk.finish.map(|f| f.as_str()),
        };
        self.chunk_of(vec![choice], self.null_usage())
    }

    fn usage(&mut self, usage: Usage) -> ChatCompletionChunk {
        self.chunk_of(vec![], Some(Some(usage)))
    }
}
