//! What a submitter and the engine thread say to each other about one request.
//!
//! A submitter hands over a validated `EngineRequest` and keeps the receiving end of its event
//! channel; the engine sends every sampled token and the ending there. Cancelling is dropping
//! the receiver: the engine sees the closed channel before its next step, frees the sequence
//! and reports the request as a departed client, not as finished. A request the server ends
//! itself goes through `EngineHandle::finish` instead, so that it is reported finished. The
//! request's tracing span comes along, so the engine's log lines about it carry the id and
//! endpoint the server gave it.

use braid_model::{Sampled, SamplingParams};
use braid_sched::FinishReason;
use braid_text::TokenConstraint;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

pub struct EngineRequest {
    pub id: u64,
    pub prompt: Vec<u32>,
    /// 0 scores the prompt and generates nothing (`echo` with `logprobs` and `max_tokens: 0`,
    /// the one case validation lets through).
    pub max_tokens: usize,
    /// Score the prompt: each prompt token's log-probability, with this many alternatives,
    /// arrives as `EngineEvent::PromptScored` before the first token.
    pub score_prompt: Option<usize>,
    /// An earlier request for another choice of the same prompt (`n` > 1): this one waits
    /// until that one has read the prompt, then shares its KV blocks through the prefix cache.
    pub shares_prompt_with: Option<u64>,
    /// The request's first sequence, when this is another of its prompts or choices: prompt
    /// reading is shared fairly among requests, not sequences.
    pub first_of_request: Option<u64>,
    pub params: SamplingParams,
    /// A structured output's grammar, which every sampled token follows.
    pub constraint: Option<TokenConstraint>,
    /// The answer's expected tokens (OpenAI's Predicted Outputs), drafted for verification.
    pub prediction: Option<Vec<u32>>,
    /// Generation ends when one of these is sampled (empty with `ignore_eos`). The stop token
    /// itself is not part of the output.
    pub stop_token_ids: Vec<u32>,
    pub arrival: Instant,
    pub events: UnboundedSender<EngineEvent>,
    /// The request's span; the engine's per-request log events are its children.
    pub span: tracing::Span,
}

impl EngineRequest {
    /// The scheduler's token limit, the one place `max_tokens` 0 becomes something else: such
    /// a request still samples the one token after its prompt (the engine does not send it).
    pub fn max_new_tokens(&self) -> usize {
        self.max_tokens.max(1)
    }
}

/// A request for the embedding model: every text's tokens, validated (non-empty, within the
/// model's length). The answer is every text's vector in order, or why the engine failed.
pub struct EmbedRequest {
    pub id: u64,
    /// Which model embeds the texts.
    pub model: EmbeddingModel,
    pub texts: Vec<Vec<u32>>,
    pub arrival: Instant,
    /// Dropping the receiver cancels: the texts still waiting are forgotten.
    pub answer: tokio::sync::oneshot::Sender<Result<Embedded, String>>,
    pub span: tracing::Span,
}

/// The model an embedding request runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbeddingModel {
    /// The sentence-transformers model (`--embedding-model`), in its own batches.
    Sentence,
    /// The generation model, its final hidden states pooled (`--pooling`): each text is read
    /// like a prompt, in slices, and answered once its last slice is read.
    Generation,
}

/// An embedding request's answer.
#[derive(Clone, Debug)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    /// Arrival to its first text's step.
    pub queue_secs: f64,
}

/// How a request ended, with its counts.
#[derive(Clone, Debug)]
pub struct Finished {
    pub reason: FinishReason,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens found in the prefix cache.
    pub cached_tokens: usize,
    /// Arrival to first scheduled, when it was scheduled at all.
    pub queue_secs: Option<f64>,
    /// How the request's `prediction` fared, when it had one.
    pub prediction: Option<PredictionUsage>,
}

/// OpenAI's `accepted_prediction_tokens` and `rejected_prediction_tokens`: the prediction's
/// tokens that became part of the answer, and the rest of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PredictionUsage {
    pub accepted: usize,
    pub rejected: usize,
}

#[derive(Debug)]
pub enum EngineEvent {
    /// The prompt's tokens with their log-probabilities (the first one has none), once the
    /// whole prompt is read; only for requests with `score_prompt`.
    PromptScored(Vec<Sampled>),
    /// A generated token (never a stop token); `finished` is set on the last one, when the
    /// token limit or the context ended the request (nothing follows it).
    Token {
        token: Sampled,
        finished: Option<Finished>,
    },
    /// The last event of a request a stop token ended (the stop token is not sent), or the
    /// engine's answer to `EngineHandle::finish`.
    Done(Finished),
    /// The engine failed while this request ran (model error or engine panic).
    Failed(String),
}

/// Why a validated request was not queued.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum SubmitError {
    #[error("the server is at capacity: {waiting} requests are already waiting; retry later")]
    QueueFull { waiting: usize },
    #[error("the inference engine has stopped")]
    EngineStopped,
    /// It could never run, whatever else is queued: only the engine knows its pool's size.
    #[error(
        "request needs {needed_tokens} KV cache tokens but the whole pool holds {pool_tokens}"
    )]
    ExceedsKvPool {
        needed_tokens: usize,
        pool_tokens: usize,
    },
}
