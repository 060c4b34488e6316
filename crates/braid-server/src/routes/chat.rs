//! POST /v1/chat/completions: messages rendered with the model's chat template, the answer
//! as an assistant message (or, streaming, deltas whose first one carries the role). With
//! tools, the answer is read for calls: each call goes to the client whole, as one delta
//! when streaming, and an answer that made calls finishes with `tool_calls`. A model that
//! reasons has its reasoning split off into `reasoning_content` (vLLM's field) first; only the
//! reply is read for calls.

use crate::generation::Chunk;
use crate::json_body::ApiJson;
use crate::logprobs::{chat_logprobs, prompt_logprobs};
use crate::openai_types::{
    unix_now, ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, ChatMessageOut, FunctionCallOut, ToolCallDelta, ToolCallOut,
    Usage,
};
use crate::request_origin::RequestOrigin;
use crate::routes::{admit, Answer};
use crate::sse::StreamFormat;
use crate::state::AppState;
use crate::tools::CallReading;
use crate::{error::ApiError, validation};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use braid_engine::FinishReason;
use braid_model::LoadedModel;
use braid_text::reasoning::{split_answer, Part, ReasoningSplitter, ReasoningSyntax};
use braid_text::tool_calls::{parse_answer, CallParser, ParsedCall, Piece};
use std::sync::Arc;

pub async fn chat_completions(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let origin = RequestOrigin::of("chat", &headers);
    let a = admit(&state, req, validation::chat, &origin).await?;
    let format = ChatFormat {
        id: state.response_id("chatcmpl", a.generations[0].id),
        created: unix_now(),
        model_name: state.served_model_name.clone(),
        model: a.model.clone(),
        logprobs: a.logprobs,
        include_usage: a.include_usage,
        tools: a.tools.clone(),
        readers: Vec::new(),
        reasoning: a.reasoning,
        splitters: Vec::new(),
    };
    let prompt_top = a.prompt_logprobs;
    let (outs, usage, format) = match a.answer(&state, format).await? {
        Answer::Stream(response) => return Ok(response),
        Answer::Whole(choices, usage, format) => (choices, usage, format),
    };
    let prompt_logprobs =
        prompt_top.map(|top| prompt_logprobs(&format.model.tokenizer, &outs[0].prompt_scored, top));
    let choices = outs
        .into_iter()
        .enumerate()
        .map(|(index, out)| {
            let (reasoning_content, reply) = match format.reasoning {
                Some((syntax, inside)) => split_answer(syntax, inside, &out.text),
                None => (None, out.text),
            };
            let (content, calls) = match &format.tools {
                Some(tools) => parse_answer(&mut tools.parser(), &reply),
                // An answer cut off while reasoning has no reply at all.
                None if reasoning_content.is_some() && reply.is_empty() => (None, Vec::new()),
                None => (Some(reply), Vec::new()),
            };
            ChatChoice {
                index,
                logprobs: format
                    .logprobs
                    .then(|| chat_logprobs(&format.model.tokenizer, &out.tokens)),
                finish_reason: Some(finish_reason(out.finish, !calls.is_empty())),
                message: ChatMessageOut {
                    role: "assistant",
                    content,
                    reasoning_content,
                    tool_calls: calls
                        .into_iter()
                        .enumerate()
                        .map(|(k, call)| format.call_out(index, k, call))
                        .collect(),
                },
            }
        })
        .collect();
    Ok(axum::Json(ChatCompletionResponse {
        id: format.id,
        object: "chat.completion",
        created: format.created,
        model: format.model_name,
        choices,
        usage,
        prompt_logprobs,
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
    tools: Option<CallReading>,
    /// Streaming with tools: each choice's reader.
    readers: Vec<CallParser>,
    /// A model that reasons: where, and whether the answer starts inside its reasoning.
    reasoning: Option<(ReasoningSyntax, bool)>,
    /// Streaming with reasoning: each choice's splitter.
    splitters: Vec<ReasoningSplitter>,
}

/// An answer that made calls and ended on its own finishes with `tool_calls`.
fn finish_reason(finish: FinishReason, made_calls: bool) -> &'static str {
    match finish {
        FinishReason::Stop if made_calls => "tool_calls",
        other => other.as_str(),
    }
}

impl ChatFormat {
    /// Choice `index`'s call number `k`, with an id unique to this response.
    fn call_out(&self, index: usize, k: usize, call: ParsedCall) -> ToolCallOut {
        let response = self.id.rsplit('-').next().unwrap_or_default();
        ToolCallOut {
            id: format!("call_{response}_{index}_{k}"),
            kind: "function",
            function: FunctionCallOut {
                name: call.name,
                arguments: call.arguments,
            },
        }
    }

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
        if let Some(tools) = &self.tools {
            self.readers = (0..choices).map(|_| tools.parser()).collect();
        }
        if let Some((syntax, inside)) = self.reasoning {
            self.splitters = (0..choices)
                .map(|_| ReasoningSplitter::new(syntax, inside))
                .collect();
        }
        let choices = (0..choices)
            .map(|index| ChatChunkChoice {
                index,
                delta: ChatDelta {
                    role: Some("assistant"),
                    content: Some(String::new()),
                    reasoning_content: None,
                    tool_calls: Vec::new(),
                },
                logprobs: None,
                finish_reason: None,
            })
            .collect();
        Some(self.chunk_of(choices, self.null_usage()))
    }

    fn chunk(&mut self, index: usize, mut chunk: Chunk) -> Option<ChatCompletionChunk> {
        let logprobs = (self.logprobs && chunk.token.is_some())
            .then(|| chat_logprobs(&self.model.tokenizer, chunk.token.as_slice()));
        let mut reasoning = None::<String>;
        if let Some(splitter) = self.splitters.get_mut(index) {
            let mut parts = splitter.push(&chunk.text);
            if chunk.finish.is_some() {
                parts.extend(splitter.finish());
            }
            chunk.text.clear();
            for part in parts {
                match part {
                    Part::Reasoning(t) => reasoning.get_or_insert_with(String::new).push_str(&t),
                    Part::Reply(t) => chunk.text.push_str(&t),
                }
            }
        }
        let splitting = !self.splitters.is_empty();
        let (content, tool_calls, made_calls) = match self.readers.get_mut(index) {
            None => {
                // The closing chunk of a generation that ended on a stop token has no new
                // text: an empty delta.
                let content = if splitting {
                    (!chunk.text.is_empty()).then_some(chunk.text)
                } else {
                    (chunk.finish.is_none() || !chunk.text.is_empty() || chunk.token.is_some())
                        .then_some(chunk.text)
                };
                (content, Vec::new(), false)
            }
            Some(reader) => {
                let mut next_call = reader.calls();
                let mut pieces = reader.push(&chunk.text);
                if chunk.finish.is_some() {
                    pieces.extend(reader.finish());
                }
                let mut text = String::new();
                let mut calls = Vec::new();
                for piece in pieces {
                    match piece {
                        Piece::Content(t) => text.push_str(&t),
                        Piece::Call(call) => {
                            calls.push((next_call, call));
                            next_call += 1;
                        }
                    }
                }
                let made_calls = reader.calls() > 0;
                ((!text.is_empty()).then_some(text), calls, made_calls)
            }
        };
        if content.is_none()
            && reasoning.is_none()
            && tool_calls.is_empty()
            && logprobs.is_none()
            && chunk.finish.is_none()
        {
            return None;
        }
        let tool_calls = tool_calls
            .into_iter()
            .map(|(k, call)| ToolCallDelta {
                index: k,
                call: self.call_out(index, k, call),
            })
            .collect();
        let choice = ChatChunkChoice {
            index,
            delta: ChatDelta {
                role: None,
                content,
                reasoning_content: reasoning,
                tool_calls,
            },
            logprobs,
            finish_reason: chunk.finish.map(|f| finish_reason(f, made_calls)),
        };
        Some(self.chunk_of(vec![choice], self.null_usage()))
    }

    fn usage(&mut self, usage: Usage) -> ChatCompletionChunk {
        self.chunk_of(vec![], Some(Some(usage)))
    }
}
