//! One request's life after validation, shared by both endpoints and both response modes.
//!
//! `Generation` submits to the engine, then turns engine events into `Chunk`s of text:
//! it detokenizes incrementally (never splitting a UTF-8 character, skipping special tokens
//! unless asked not to),
//! applies stop strings, enforces the per-request deadline, and writes the one log line per
//! request when it is dropped, whether it finished, failed or its client went away.
//!
//! Stop tokens, `max_tokens` and the end of the context are the scheduler's to decide; the
//! engine's events say when and why it ended, and this only relays that. What is left here
//! needs the text (stop strings) or the clock (the deadline), and ends the request in the
//! engine with `EngineHandle::finish`, so that the engine reports every finished request,
//! once, in the same way; it waits for the engine's answer before releasing the end, so a
//! client that reads /metrics after its response sees itself counted. Dropping a generation
//! that has not ended is a client that left: the engine frees the sequence and reports no
//! finish. The tokens a request generated are counted here, as they are passed on; the engine
//! reports what this says. Each generation has a tracing span (`request`, with its id and
//! endpoint) that goes with it into the engine, so the engine's log lines about it are the
//! span's children.

use crate::error::ApiError;
use crate::openai_types::{CompletionTokensDetails, Usage};
use crate::request_origin::RequestOrigin;
use crate::request_traces::{RequestTraces, TracedRequest};
use crate::state::{AppState, Ready};
use crate::stop_strings::{StopMatcher, StopOutcome};
use crate::validation::ValidatedRequest;
use braid_engine::{
    EngineEvent, EngineHandle, EngineRequest, FinishReason, Finished, PredictionUsage,
};
use braid_model::{LoadedModel, Sampled};
use braid_text::IncrementalDecoder;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// Longest wait for the engine to answer a finish (it reads its channel between steps, so it
/// answers within a step): a wedged engine cannot hold a request past its deadline for longer.
const FINISH_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Text released for the client, with the token that produced it; the last chunk of a
/// generation carries its finish reason.
#[derive(Clone, Debug)]
pub struct Chunk {
    pub text: String,
    /// The prompt's scored tokens, on the first chunk of a request that scores its prompt.
    pub prompt_scored: Vec<Sampled>,
    pub token: Option<Sampled>,
    pub finish: Option<FinishReason>,
    /// On the last chunk of a text a stop string ended: that string.
    pub stop_string: Option<String>,
}

/// A finished non-streaming generation.
#[derive(Clone, Debug)]
pub struct Collected {
    pub text: String,
    pub prompt_scored: Vec<Sampled>,
    pub tokens: Vec<Sampled>,
    pub finish: FinishReason,
    /// The stop string that ended the text, if one did.
    pub stop_string: Option<String>,
    pub usage: Usage,
}

/// How a generation ended, for its log line.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    Finished(FinishReason),
    Failed,
}

pub struct Generation {
    pub id: u64,
    endpoint: &'static str,
    /// The caller's `x-request-id` and trace context, for the request's trace.
    request_id: String,
    trace_parent: opentelemetry::Context,
    traces: Option<Arc<RequestTraces>>,
    engine: EngineHandle,
    model: Arc<LoadedModel>,
    /// None once the generation has ended (dropping it cancels the engine's sequence).
    events: Option<UnboundedReceiver<EngineEvent>>,
    decoder: IncrementalDecoder,
    skip_special_tokens: bool,
    stops: StopMatcher,
    /// Text to put before the first chunk (`echo`).
    prefix: Option<String>,
    /// The prompt's scores, from the engine, to go with the first chunk.
    prompt_scored: Vec<Sampled>,
    prompt_tokens: usize,
    /// Tokens passed on to the client: the request's one count of them.
    completion_tokens: usize,
    arrival: Instant,
    deadline: tokio::time::Instant,
    first_token: Option<Instant>,
    /// From the engine's report, once it has one.
    queue_secs: Option<f64>,
    cached_tokens: Option<usize>,
    /// How its prediction fared, when it had one (from the engine's report).
    prediction: Option<PredictionUsage>,
    ended: Option<(Instant, Outcome)>,
    deadline_reached: bool,
    span: tracing::Span,
}

impl Generation {
    /// Submits `req` to the engine: 429 when its queue is full, 400 when its KV pool could
    /// never hold it.
    /// `shares_prompt_with`: the generation of another choice of the same prompt, whose KV
    /// blocks this one reuses. `first_of_request`: the request's first generation, when this
    /// is another of its prompts or choices.
    pub fn start(
        state: &AppState,
        ready: &Ready,
        req: ValidatedRequest,
        arrival: Instant,
        origin: &RequestOrigin,
        shares_prompt_with: Option<u64>,
        first_of_request: Option<u64>,
    ) -> Result<Self, ApiError> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let id = ready.engine.next_request_id();
        let endpoint = origin.endpoint;
        let span = tracing::info_span!("request", id, endpoint);
        let prompt_tokens = req.prompt.len();
        ready.engine.submit(EngineRequest {
            id,
            prompt: req.prompt,
            max_tokens: req.max_tokens,
            score_prompt: req.score_prompt,
            shares_prompt_with,
            first_of_request,
            params: req.params,
            constraint: req.constraint,
            prediction: req.prediction,
            stop_token_ids: req.stop_token_ids,
            arrival,
            events: tx,
            span: span.clone(),
        })?;
        Ok(Self {
            id,
            endpoint,
            request_id: origin.request_id.clone(),
            trace_parent: origin.trace_parent.clone(),
            traces: state.traces.get().cloned(),
            engine: ready.engine.clone(),
            model: ready.generator()?.clone(),
            events: Some(rx),
            decoder: IncrementalDecoder::default(),
            skip_special_tokens: req.skip_special_tokens,
            stops: StopMatcher::new(req.stop_strings, req.keep_stop_string),
            prefix: req.echo,
            prompt_scored: Vec::new(),
            prompt_tokens,
            completion_tokens: 0,
            arrival,
            deadline: tokio::time::Instant::from_std(arrival + state.request_timeout),
            first_token: None,
            queue_secs: None,
            cached_tokens: None,
            prediction: None,
            ended: None,
            deadline_reached: false,
            span,
        })
    }

    pub fn usage(&self) -> Usage {
        Usage::new(self.prompt_tokens, self.completion_tokens)
            .with_cached(self.cached_tokens.unwrap_or(0))
            .with_details(self.prediction.map(|p| CompletionTokensDetails {
                accepted_prediction_tokens: p.accepted,
                rejected_prediction_tokens: p.rejected,
            }))
    }

    /// The next chunk; `Err` is an engine failure (the generation is over); None after the end.
    pub async fn next(&mut self) -> Option<Result<Chunk, String>> {
        let events = self.events.as_mut()?;
        let mut event = tokio::time::timeout_at(self.deadline, events.recv()).await;
        if let Ok(Some(EngineEvent::PromptScored(scored))) = event {
            self.prompt_scored = scored;
            event = tokio::time::timeout_at(self.deadline, events.recv()).await;
        }
        let event = match event {
            Err(_) => {
                self.deadline_reached = true;
                let chunk = self.finish(FinishReason::Length, None, String::new());
                if let Some(reason) = chunk.finish {
                    self.end_in_engine(reason).await;
                }
                return Some(Ok(chunk));
            }
            Ok(None) => {
                return Some(Err(
                    self.fail("the engine dropped the request without finishing it".into())
                ))
            }
            Ok(Some(event)) => event,
        };
        Some(match event {
            EngineEvent::Token { token, finished } => {
                self.completion_tokens += 1;
                self.first_token.get_or_insert_with(Instant::now);
                let piece =
                    self.decoder
                        .push(&self.model.tokenizer, token.token, self.skip_special_tokens);
                match (self.stops.push(&piece), finished) {
                    (StopOutcome::Stopped(text), finished) => {
                        self.ended = Some((Instant::now(), Outcome::Finished(FinishReason::Stop)));
                        match finished {
                            // The engine's last token: the engine has reported it already.
                            Some(finished) => {
                                self.events = None;
                                self.note_report(&finished);
                            }
                            None => self.end_in_engine(FinishReason::Stop).await,
                        }
                        Ok(self.chunk(text, Some(token), Some(FinishReason::Stop)))
                    }
                    // The engine's last token: the end comes with it.
                    (StopOutcome::Continue(text), Some(finished)) => {
                        Ok(self.finish_with(finished, Some(token), text))
                    }
                    (StopOutcome::Continue(text), None) => Ok(self.chunk(text, Some(token), None)),
                }
            }
            EngineEvent::Done(finished) => Ok(self.finish_with(finished, None, String::new())),
            EngineEvent::Failed(message) => Err(self.fail(message)),
            EngineEvent::PromptScored(_) => {
                Err(self.fail("the engine scored the prompt twice".into()))
            }
        })
    }

    /// Runs the generation to its end (non-streaming responses).
    pub async fn collect(mut self) -> Result<Collected, ApiError> {
        let mut text = String::new();
        let mut tokens = Vec::new();
        let mut prompt_scored = Vec::new();
        while let Some(item) = self.next().await {
            let chunk = item.map_err(|m| ApiError::internal(format!("generation failed: {m}")))?;
            text.push_str(&chunk.text);
            prompt_scored.extend(chunk.prompt_scored);
            tokens.extend(chunk.token);
            if let Some(finish) = chunk.finish {
                return Ok(Collected {
                    text,
                    prompt_scored,
                    tokens,
                    finish,
                    stop_string: chunk.stop_string,
                    usage: self.usage(),
                });
            }
        }
        Err(ApiError::internal(
            "the generation ended without a finish reason",
        ))
    }

    fn chunk(
        &mut self,
        text: String,
        token: Option<Sampled>,
        finish: Option<FinishReason>,
    ) -> Chunk {
        let text = match self.prefix.take() {
            Some(mut prefix) => {
                prefix.push_str(&text);
                prefix
            }
            None => text,
        };
        let stop_string = finish
            .is_some()
            .then(|| self.stops.matched().map(str::to_string))
            .flatten();
        Chunk {
            text,
            prompt_scored: std::mem::take(&mut self.prompt_scored),
            token,
            finish,
            stop_string,
        }
    }

    /// Ends the generation as the engine says it ended.
    fn finish_with(&mut self, finished: Finished, token: Option<Sampled>, text: String) -> Chunk {
        self.events = None;
        debug_assert_eq!(
            finished.completion_tokens, self.completion_tokens,
            "the engine reports the tokens this passed on"
        );
        self.note_report(&finished);
        self.finish(finished.reason, token, text)
    }

    /// Takes what the engine's report knows that this does not.
    fn note_report(&mut self, finished: &Finished) {
        self.queue_secs = finished.queue_secs;
        self.cached_tokens = Some(finished.cached_tokens);
        self.prediction = finished.prediction;
    }

    /// Ends the request in the engine for `reason`, this side's decision (a stop string, the
    /// deadline), and waits for the engine's answer: by then the request is reported finished.
    /// Tokens the engine sent meanwhile are not the client's and are dropped. If the engine
    /// ended the request first, its ending stands (and was reported as it said).
    async fn end_in_engine(&mut self, reason: FinishReason) {
        let Some(mut events) = self.events.take() else {
            return;
        };
        self.engine.finish(self.id, reason, self.completion_tokens);
        let answer = async {
            loop {
                match events.recv().await {
                    Some(EngineEvent::Token { finished: None, .. })
                    | Some(EngineEvent::PromptScored(_)) => {}
                    Some(EngineEvent::Done(finished))
                    | Some(EngineEvent::Token {
                        finished: Some(finished),
                        ..
                    }) => return Some(finished),
                    Some(EngineEvent::Failed(_)) | None => return None,
                }
            }
        };
        if let Ok(Some(finished)) = tokio::time::timeout(FINISH_ANSWER_WAIT, answer).await {
            self.note_report(&finished);
        }
    }

    /// Ends the generation for `reason`, releasing held text (a stop string may still match
    /// in the last bytes, which makes the reason "stop"). The caller lets go of the events.
    fn finish(
        &mut self,
        mut reason: FinishReason,
        token: Option<Sampled>,
        mut text: String,
    ) -> Chunk {
        let tail = self.decoder.finish();
        match self.stops.push(&tail) {
            StopOutcome::Stopped(t) => {
                text.push_str(&t);
                reason = FinishReason::Stop;
            }
            StopOutcome::Continue(t) => {
                text.push_str(&t);
                text.push_str(&self.stops.finish());
            }
        }
        self.ended = Some((Instant::now(), Outcome::Finished(reason)));
        self.chunk(text, token, Some(reason))
    }

    fn fail(&mut self, message: String) -> String {
        self.events = None;
        self.ended = Some((Instant::now(), Outcome::Failed));
        tracing::error!(parent: &self.span, id = self.id, "request failed in the engine: {message}");
        message
    }
}

impl Drop for Generation {
    /// The request's one log line.
    fn drop(&mut self) {
        let (end, finish_reason, status) = match self.ended {
            Some((t, Outcome::Finished(r))) => (t, r.as_str(), 200),
            Some((t, Outcome::Failed)) => (t, "error", 500),
            // Dropped mid-generation: the client went away (499, as nginx says).
            None => (Instant::now(), "cancelled", 499),
        };
        let ms = |t: Instant| {
            (t.saturating_duration_since(self.arrival).as_secs_f64() * 1000.0 * 10.0).round() / 10.0
        };
        if self.deadline_reached {
            tracing::warn!(
                parent: &self.span,
                id = self.id,
                "request reached --request-timeout-secs; ended with finish_reason \"length\""
            );
        }
        tracing::info!(
            parent: &self.span,
            id = self.id,
            endpoint = self.endpoint,
            prompt_tokens = self.prompt_tokens,
            cached_tokens = self.cached_tokens,
            completion_tokens = self.completion_tokens,
            queue_ms = self.queue_secs.map(|q| (q * 1e4).round() / 10.0),
            ttft_ms = self.first_token.map(ms),
            e2e_ms = ms(end),
            finish_reason,
            status,
            "request finished"
        );
        if let Some(traces) = &self.traces {
            traces.record(&TracedRequest {
                parent: &self.trace_parent,
                request_id: &self.request_id,
                id: self.id,
                endpoint: self.endpoint,
                arrival: self.arrival,
                queue: self.queue_secs.map(Duration::from_secs_f64),
                first_token: self.first_token,
                end,
                prompt_tokens: self.prompt_tokens,
                cached_tokens: self.cached_tokens,
                completion_tokens: self.completion_tokens,
                finish_reason,
            });
        }
    }
}

#[cfg(test)]
#[path = "generation_tests.rs"]
mod tests;
