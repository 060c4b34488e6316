//! POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API, as the
//! `openai` SDK's `responses.create` and the agents built on it (OpenAI's Agents SDK, Codex)
//! speak it.
//!
//! A Responses request is a chat request in other words, so it is translated into one
//! (`responses_input.rs`) and runs the chat path: the same template, tools prompt, call
//! grammar, validation and engine. The answer comes back as output items (reasoning, then a
//! message, then function calls), streamed as OpenAI's typed events, each numbered; an
//! answer cut by `max_output_tokens` is `incomplete` and says so, in the stream too
//! (`response.incomplete`).
//!
//! `store` keeps the response and its conversation in a bounded in-memory store
//! (`response_store.rs`), so `previous_response_id` can continue it; a response that is not
//! there is a 400 saying why it may be missing, never an answer without its history.
//! Whatever braid cannot honour (hosted tools, images, background runs, truncation) is a 400
//! naming the field.

use crate::error::ApiError;
use crate::generation::Chunk;
use crate::json_body::ApiJson;
use crate::openai_types::{unix_now, Usage};
use crate::request_origin::RequestOrigin;
use crate::response_store::{NotStored, ResponseStore, Stored};
use crate::responses_input::{conversation_of, to_chat, Options, RESPONSES_NAMES};
use crate::responses_types::{
    IncompleteDetails, InputTokensDetails, OutputItem, OutputText, OutputTokensDetails,
    ReasoningConfig, ResponseDeleted, ResponseObject, ResponseUsage, ResponsesRequest, TextConfig,
    TextPart,
};
use crate::routes::{admit, Answer};
use crate::sse::StreamFormat;
use crate::state::AppState;
use crate::validation;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use braid_engine::FinishReason;
use braid_text::reasoning::{Part, ReasoningSplitter, ReasoningSyntax};
use braid_text::tool_calls::{parse_answer, CallParser, ParsedCall, Piece};
use serde_json::{json, Map, Value};
use std::sync::Arc;

pub async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ResponsesRequest>,
) -> Result<Response, ApiError> {
    let origin = RequestOrigin::of("responses", &headers);
    let store = stores(&state.responses, &req)?;
    let history = match &req.previous_response_id {
        Some(id) => previous(&state.responses, id)?.conversation,
        None => Vec::new(),
    };
    let options = Options::of(&req)?;
    let mut conversation = history;
    conversation.extend(conversation_of(req.input.as_ref())?);
    let chat = to_chat(&req, &conversation)?;
    let a = admit(&state, chat, validation::chat, &origin)
        .await
        .map_err(|e| e.renamed(RESPONSES_NAMES))?;
    let id = state
        .response_id("resp", a.generations[0].id)
        .replace('-', "_");
    let shape = Shape::of(&req, id, state.served_model_name.clone(), store, options);
    let (model, tools, reasoning) = (a.model.clone(), a.tools.clone(), a.reasoning);
    let format = ResponsesFormat::new(
        shape,
        tools.as_ref().map(|t| t.parser()),
        reasoning.map(|(syntax, inside)| ReasoningSplitter::new(syntax, inside)),
        store.then(|| (state.responses.clone(), conversation)),
    );
    let (mut outs, usage, format) = match a.answer(&state, format).await? {
        Answer::Stream(response) => return Ok(response),
        Answer::Whole(choices, usage, format) => (choices, usage, format),
    };
    let out = outs.remove(0);
    let pieces = out
        .tokens
        .iter()
        .map(|t| model.tokenizer.decode(&[t.token], false));
    let reasoning_tokens = match reasoning {
        Some((syntax, inside)) => count_reasoning(syntax, inside, pieces),
        None => 0,
    };
    let mut f = format;
    f.reasoning_tokens = reasoning_tokens;
    f.whole(&out.text, out.finish, reasoning, &tools);
    let response = f.finished(out.finish, usage);
    Ok(Json(response).into_response())
}

pub async fn retrieve(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.responses.get(&id) {
        Some(stored) => Ok(Json(stored.response)),
        None => Err(not_found(&state.responses, &id)),
    }
}

pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ResponseDeleted>, ApiError> {
    if !state.responses.delete(&id) {
        return Err(not_found(&state.responses, &id));
    }
    Ok(Json(ResponseDeleted {
        id,
        object: "response.deleted",
        deleted: true,
    }))
}

fn not_found(store: &ResponseStore, id: &str) -> ApiError {
    ApiError::not_found(format!(
        "no stored response `{id}`: {}",
        missing_because(store)
    ))
}

/// Why a response id may not be in the store.
fn missing_because(store: &ResponseStore) -> String {
    if !store.is_on() {
        return "this server keeps no responses (--response-store-mb 0)".into();
    }
    format!(
        "it was made with `store: false`, was deleted, or has left the store (responses are kept \
         {} s and while the store, --response-store-mb, has room)",
        store.ttl().as_secs()
    )
}

/// Whether the response is kept: `store` as asked, by default when the store is on.
fn stores(store: &ResponseStore, req: &ResponsesRequest) -> Result<bool, ApiError> {
    match req.store {
        Some(true) if !store.is_on() => Err(ApiError::unsupported(
            "store",
            "`store: true` cannot be honoured: this server keeps no responses \
             (--response-store-mb 0); send `store: false` and the whole conversation in `input`",
        )),
        Some(asked) => Ok(asked),
        None => Ok(store.is_on()),
    }
}

/// The stored response `id` continues, or the 400 saying why it is not there.
fn previous(store: &ResponseStore, id: &str) -> Result<Stored, ApiError> {
    store.get(id).ok_or_else(|| {
        ApiError::bad_request(format!(
            "previous response `{id}` is not stored here: {}; send the conversation in `input` \
             instead",
            missing_because(store)
        ))
        .with_param("previous_response_id")
        .with_code("previous_response_not_found")
    })
}

/// The output tokens up to the end of the reasoning, of an answer whose tokens read as
/// `pieces`.
fn count_reasoning(
    syntax: ReasoningSyntax,
    inside: bool,
    pieces: impl Iterator<Item = String>,
) -> usize {
    let mut splitter = ReasoningSplitter::new(syntax, inside);
    pieces
        .filter(|piece| split_counting(&mut splitter, piece).1)
        .count()
}

/// `text`'s parts, and whether its token is a reasoning token: one that opened, continued or
/// closed the reasoning finds it open before or after.
fn split_counting(splitter: &mut ReasoningSplitter, text: &str) -> (Vec<Part>, bool) {
    let before = splitter.in_reasoning();
    let parts = splitter.push(text);
    (parts, before || splitter.in_reasoning())
}

/// What the response object says besides its output: the request's settings, echoed.
struct Shape {
    id: String,
    created_at: u64,
    model: String,
    store: bool,
    options: Options,
    instructions: Option<String>,
    max_output_tokens: Option<i64>,
    max_tool_calls: Option<i64>,
    parallel_tool_calls: bool,
    previous_response_id: Option<String>,
    reasoning: ReasoningConfig,
    temperature: Option<f64>,
    text: TextConfig,
    tool_choice: Value,
    tools: Vec<Value>,
    top_p: Option<f64>,
    user: Option<String>,
    metadata: Map<String, Value>,
}

impl Shape {
    fn of(
        req: &ResponsesRequest,
        id: String,
        model: String,
        store: bool,
        options: Options,
    ) -> Self {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .flatten()
            .map(|t| {
                let mut t = t.clone();
                if t.get("strict").is_none_or(Value::is_null) {
                    t["strict"] = json!(true);
                }
                if t.get("parameters").is_none() {
                    t["parameters"] = Value::Null;
                }
                t
            })
            .collect();
        let text = req.text.clone().unwrap_or_default();
        Self {
            id,
            created_at: unix_now(),
            model,
            store,
            options,
            instructions: req.instructions.clone(),
            max_output_tokens: req.max_output_tokens,
            max_tool_calls: req.max_tool_calls,
            parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
            previous_response_id: req.previous_response_id.clone(),
            reasoning: ReasoningConfig {
                effort: req.reasoning.as_ref().and_then(|r| r.effort.clone()),
                summary: req
                    .reasoning
                    .as_ref()
                    .and_then(|r| r.summary.clone().or_else(|| r.generate_summary.clone())),
                generate_summary: None,
            },
            temperature: req.temperature,
            text: TextConfig {
                format: Some(text.format.unwrap_or_else(|| json!({"type": "text"}))),
                verbosity: text.verbosity,
            },
            tool_choice: req.tool_choice.clone().unwrap_or_else(|| json!("auto")),
            tools,
            top_p: req.top_p,
            user: req.user.clone(),
            metadata: req.metadata.clone().unwrap_or_default(),
        }
    }

    fn object(
        &self,
        status: &'static str,
        output: Vec<OutputItem>,
        usage: Option<ResponseUsage>,
    ) -> ResponseObject {
        ResponseObject {
            id: self.id.clone(),
            object: "response",
            created_at: self.created_at,
            status,
            completed_at: (status != "in_progress").then(unix_now),
            error: None,
            incomplete_details: (status == "incomplete").then_some(IncompleteDetails {
                reason: "max_output_tokens",
            }),
            instructions: self.instructions.clone(),
            max_output_tokens: self.max_output_tokens,
            max_tool_calls: self.max_tool_calls,
            model: self.model.clone(),
            output,
            parallel_tool_calls: self.parallel_tool_calls,
            previous_response_id: self.previous_response_id.clone(),
            reasoning: self.reasoning.clone(),
            store: self.store,
            temperature: self.temperature,
            text: self.text.clone(),
            tool_choice: self.tool_choice.clone(),
            tools: self.tools.clone(),
            top_p: self.top_p,
            truncation: "disabled",
            usage,
            user: self.user.clone(),
            metadata: self.metadata.clone(),
            background: false,
            service_tier: "default",
        }
    }

    /// The key every id of this response's items is made from.
    fn key(&self) -> &str {
        self.id.rsplit('_').next().unwrap_or_default()
    }
}

/// The item being streamed: its index in `output`, its kind and its text so far.
struct OpenItem {
    index: usize,
    reasoning: bool,
    text: String,
}

/// The response being written, as its stream of events; also what shapes a whole answer.
struct ResponsesFormat {
    shape: Shape,
    /// With tools: how the answer is read for calls.
    reader: Option<CallParser>,
    /// A model that reasons: what splits its reasoning off.
    splitter: Option<ReasoningSplitter>,
    reasoning_tokens: usize,
    /// The next event's `sequence_number`.
    sequence: usize,
    /// The items finished so far.
    output: Vec<OutputItem>,
    open: Option<OpenItem>,
    calls: usize,
    finish: Option<FinishReason>,
    /// With `store`: where the finished response goes, and the conversation it answers.
    keep: Option<(Arc<ResponseStore>, Vec<Value>)>,
}

impl ResponsesFormat {
    fn new(
        shape: Shape,
        reader: Option<CallParser>,
        splitter: Option<ReasoningSplitter>,
        keep: Option<(Arc<ResponseStore>, Vec<Value>)>,
    ) -> Self {
        Self {
            shape,
            reader,
            splitter,
            reasoning_tokens: 0,
            sequence: 0,
            output: Vec::new(),
            open: None,
            calls: 0,
            finish: None,
            keep,
        }
    }

    fn event(&mut self, kind: &str, mut body: Value) -> Value {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        body
    }

    fn item_id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_{}_{index}", self.shape.key())
    }

    fn reasoning_item(&self, index: usize, text: String, status: &'static str) -> OutputItem {
        let options = self.shape.options;
        OutputItem::Reasoning {
            id: self.item_id("rs", index),
            summary: if options.summary && !text.is_empty() {
                vec![TextPart {
                    kind: "summary_text",
                    text: text.clone(),
                }]
            } else {
                Vec::new()
            },
            encrypted_content: options.encrypted_reasoning.then(|| text.clone()),
            content: vec![TextPart {
                kind: "reasoning_text",
                text,
            }],
            status,
        }
    }

    fn message_item(&self, index: usize, text: String, status: &'static str) -> OutputItem {
        OutputItem::Message {
            id: self.item_id("msg", index),
            status,
            role: "assistant",
            content: vec![OutputText::new(text)],
        }
    }

    fn call_item(&mut self, index: usize, call: ParsedCall) -> OutputItem {
        let call_id = format!("call_{}_{}", self.shape.key(), self.calls);
        self.calls += 1;
        OutputItem::FunctionCall {
            id: self.item_id("fc", index),
            call_id,
            name: call.name,
            arguments: call.arguments,
            status: "completed",
        }
    }

    /// A whole answer's items: reasoning, the reply as a message (unless the answer is only
    /// calls), then its calls.
    fn whole(
        &mut self,
        text: &str,
        finish: FinishReason,
        reasoning: Option<(ReasoningSyntax, bool)>,
        tools: &Option<crate::tools::CallReading>,
    ) {
        let (thinking, reply) = match reasoning {
            Some((syntax, inside)) => braid_text::reasoning::split_answer(syntax, inside, text),
            None => (None, text.to_string()),
        };
        let (reply, calls) = match tools {
            Some(tools) => parse_answer(&mut tools.parser(), &reply),
            None => (Some(reply), Vec::new()),
        };
        let status = item_status(finish);
        if let Some(thinking) = thinking {
            let index = self.output.len();
            let item = self.reasoning_item(index, thinking, status);
            self.output.push(item);
        }
        let reply = reply.filter(|r| !r.is_empty());
        if reply.is_some() || (calls.is_empty() && self.output.is_empty()) {
            let index = self.output.len();
            let item = self.message_item(index, reply.unwrap_or_default(), status);
            self.output.push(item);
        }
        for call in calls {
            let index = self.output.len();
            let item = self.call_item(index, call);
            self.output.push(item);
        }
    }

    /// The finished response, kept in the store if it asked to be.
    fn finished(&mut self, finish: FinishReason, usage: Usage) -> ResponseObject {
        let status = match finish {
            FinishReason::Length => "incomplete",
            _ => "completed",
        };
        let usage = ResponseUsage {
            input_tokens: usage.prompt_tokens,
            input_tokens_details: InputTokensDetails {
                cached_tokens: usage.cached_tokens,
            },
            output_tokens: usage.completion_tokens,
            output_tokens_details: OutputTokensDetails {
                reasoning_tokens: self.reasoning_tokens,
            },
            total_tokens: usage.total_tokens,
        };
        let response = self.shape.object(status, self.output.clone(), Some(usage));
        if let Some((store, mut conversation)) = self.keep.take() {
            conversation.push(assistant_turn(&self.output));
            let stored = Stored {
                response: serde_json::to_value(&response).unwrap_or_default(),
                conversation,
            };
            if let Err(NotStored::TooLarge { bytes, max_bytes }) =
                store.insert(response.id.clone(), stored)
            {
                tracing::warn!(
                    id = response.id,
                    bytes,
                    max_bytes,
                    "a response is larger than the whole response store (--response-store-mb) and was not kept"
                );
            }
        }
        response
    }

    /// Closes the open item: its text's done events, then `output_item.done`.
    fn close(&mut self, status: &'static str, events: &mut Vec<Value>) {
        let Some(open) = self.open.take() else {
            return;
        };
        let (index, item_id) = (
            open.index,
            self.item_id(if open.reasoning { "rs" } else { "msg" }, open.index),
        );
        let (done, part, item) = if open.reasoning {
            (
                "response.reasoning_text.done",
                json!({"type": "reasoning_text", "text": open.text}),
                self.reasoning_item(index, open.text.clone(), status),
            )
        } else {
            (
                "response.output_text.done",
                serde_json::to_value(OutputText::new(open.text.clone())).unwrap_or_default(),
                self.message_item(index, open.text.clone(), status),
            )
        };
        let mut body = json!({"item_id": item_id, "output_index": index, "content_index": 0, "text": open.text});
        if !open.reasoning {
            body["logprobs"] = json!([]);
        }
        events.push(self.event(done, body));
        events.push(self.event(
            "response.content_part.done",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": part}),
        ));
        events.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
    }

    /// Opens an item of the kind, closing the other kind's first (its events: the item and
    /// its one content part, empty).
    fn open_item(&mut self, reasoning: bool, events: &mut Vec<Value>) {
        if self.open.as_ref().is_some_and(|o| o.reasoning == reasoning) {
            return;
        }
        self.close("completed", events);
        let index = self.output.len();
        let (mut item, part) = if reasoning {
            let item = self.reasoning_item(index, String::new(), "in_progress");
            let mut item = serde_json::to_value(item).unwrap_or_default();
            item["summary"] = json!([]);
            (item, json!({"type": "reasoning_text", "text": ""}))
        } else {
            let item = self.message_item(index, String::new(), "in_progress");
            let part = serde_json::to_value(OutputText::new(String::new())).unwrap_or_default();
            (serde_json::to_value(item).unwrap_or_default(), part)
        };
        item["content"] = json!([]);
        let item_id = item["id"].clone();
        events.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        events.push(self.event(
            "response.content_part.added",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "part": part}),
        ));
        self.open = Some(OpenItem {
            index,
            reasoning,
            text: String::new(),
        });
    }

    /// Streams `text` into the open item of its kind, opening one first.
    fn stream_text(&mut self, text: String, reasoning: bool, events: &mut Vec<Value>) {
        if text.is_empty() {
            return;
        }
        self.open_item(reasoning, events);
        let Some(open) = self.open.as_mut() else {
            return;
        };
        open.text.push_str(&text);
        let index = open.index;
        let item_id = self.item_id(if reasoning { "rs" } else { "msg" }, index);
        let (kind, mut body) = if reasoning {
            ("response.reasoning_text.delta", json!({}))
        } else {
            ("response.output_text.delta", json!({"logprobs": []}))
        };
        body["item_id"] = json!(item_id);
        body["output_index"] = json!(index);
        body["content_index"] = json!(0);
        body["delta"] = json!(text);
        events.push(self.event(kind, body));
    }

    fn stream_call(&mut self, call: ParsedCall, events: &mut Vec<Value>) {
        self.close("completed", events);
        let index = self.output.len();
        let item = self.call_item(index, call);
        let OutputItem::FunctionCall { id, arguments, .. } = &item else {
            return;
        };
        let (id, arguments) = (id.clone(), arguments.clone());
        let mut added = serde_json::to_value(&item).unwrap_or_default();
        added["arguments"] = json!("");
        added["status"] = json!("in_progress");
        events.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        ));
        events.push(self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": arguments}),
        ));
        events.push(self.event(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": arguments}),
        ));
        events.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
    }
}

/// An output item's status for an answer that ended so.
fn item_status(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::Length => "incomplete",
        _ => "completed",
    }
}

/// The response's output as the assistant turn of its conversation.
fn assistant_turn(output: &[OutputItem]) -> Value {
    let mut message = json!({"role": "assistant", "content": ""});
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in output {
        match item {
            OutputItem::Reasoning { content, .. } => {
                let reasoning: String = content.iter().map(|p| p.text.as_str()).collect();
                message["reasoning_content"] = json!(reasoning);
            }
            OutputItem::Message { content, .. } => {
                text.extend(content.iter().map(|p| p.text.as_str()));
            }
            OutputItem::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => calls.push(json!({
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            })),
        }
    }
    message["content"] = json!(text);
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    message
}

impl StreamFormat for ResponsesFormat {
    type Json = Vec<Value>;

    fn opening(&mut self, _choices: usize) -> Option<Vec<Value>> {
        let response = serde_json::to_value(self.shape.object("in_progress", Vec::new(), None))
            .unwrap_or_default();
        Some(vec![
            self.event("response.created", json!({"response": response})),
            self.event("response.in_progress", json!({"response": response})),
        ])
    }

    fn chunk(&mut self, _index: usize, chunk: Chunk) -> Option<Vec<Value>> {
        let mut events = Vec::new();
        let mut reply = chunk.text;
        if let Some(splitter) = self.splitter.as_mut() {
            let (mut parts, reasoning) = split_counting(splitter, &reply);
            if reasoning {
                self.reasoning_tokens += 1;
            }
            if chunk.finish.is_some() {
                parts.extend(splitter.finish());
            }
            reply = String::new();
            for part in parts {
                match part {
                    Part::Reasoning(t) => self.stream_text(t, true, &mut events),
                    Part::Reply(t) => reply.push_str(&t),
                }
            }
        }
        let pieces = match self.reader.as_mut() {
            Some(reader) => {
                let mut pieces = reader.push(&reply);
                if chunk.finish.is_some() {
                    pieces.extend(reader.finish());
                }
                pieces
            }
            None => vec![Piece::Content(reply)],
        };
        for piece in pieces {
            match piece {
                Piece::Content(text) => self.stream_text(text, false, &mut events),
                Piece::Call(call) => self.stream_call(call, &mut events),
            }
        }
        if let Some(finish) = chunk.finish {
            // An answer with no text and no call still answers with an (empty) message.
            if self.output.is_empty() && self.open.is_none() {
                self.open_item(false, &mut events);
            }
            self.close(item_status(finish), &mut events);
            self.finish = Some(finish);
        }
        (!events.is_empty()).then_some(events)
    }

    fn usage(&mut self, usage: Usage) -> Vec<Value> {
        let finish = self.finish.unwrap_or(FinishReason::Stop);
        let response = self.finished(finish, usage);
        let kind = match response.status {
            "incomplete" => "response.incomplete",
            _ => "response.completed",
        };
        let response = serde_json::to_value(&response).unwrap_or_default();
        vec![self.event(kind, json!({"response": response}))]
    }

    fn events(item: &Vec<Value>) -> Vec<Event> {
        item.iter()
            .map(|e| {
                Event::default()
                    .event(e["type"].as_str().unwrap_or("message"))
                    .json_data(e)
                    .unwrap_or_else(|err| Event::default().event("error").data(err.to_string()))
            })
            .collect()
    }

    fn error_event(error: &ApiError) -> Event {
        let body = json!({
            "type": "error",
            "code": error.detail.code,
            "message": error.detail.message,
            "param": error.detail.param,
            "sequence_number": 0,
        });
        Event::default()
            .event("error")
            .json_data(&body)
            .unwrap_or_else(|err| Event::default().event("error").data(err.to_string()))
    }

    const DONE: bool = false;
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_text::reasoning::THINK;

    fn format(summary: bool) -> ResponsesFormat {
        let req = ResponsesRequest::default();
        let options = Options {
            summary,
            encrypted_reasoning: false,
        };
        ResponsesFormat::new(
            Shape::of(&req, "resp_k1".into(), "m".into(), false, options),
            Some(crate::tools::CallReading::for_names(vec!["f".into()], false).parser()),
            Some(ReasoningSplitter::new(THINK, false)),
            None,
        )
    }

    fn chunk(text: &str, finish: Option<FinishReason>) -> Chunk {
        Chunk {
            text: text.into(),
            prompt_scored: Vec::new(),
            token: None,
            finish,
            stop_string: None,
        }
    }

    /// An answer that reasons, writes, then calls, in pieces that split the tags: a reasoning
    /// item, a message and a function call, each added, filled and done in turn, numbered
    /// without a gap, and the tokens up to the closing tag counted as reasoning.
    #[test]
    fn a_reasoning_answer_streams_as_reasoning_then_message_then_call() {
        let mut f = format(true);
        let answer = [
            "<thi",
            "nk>Hmm.</th",
            "ink>\n\nOK.",
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
        ];
        let mut events: Vec<Value> = f.opening(1).unwrap();
        for (i, piece) in answer.iter().enumerate() {
            let finish = (i == answer.len() - 1).then_some(FinishReason::Stop);
            events.extend(f.chunk(0, chunk(piece, finish)).unwrap_or_default());
        }
        events.extend(f.usage(Usage::new(3, 4)));
        let numbers: Vec<u64> = events
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, (0..events.len() as u64).collect::<Vec<_>>());
        let shape: Vec<String> = events
            .iter()
            .map(|e| {
                let kind = e["type"].as_str().unwrap().trim_start_matches("response.");
                match kind {
                    "output_item.added" | "output_item.done" => {
                        format!("{kind} {} {}", e["output_index"], e["item"]["type"])
                    }
                    k if k.ends_with(".delta") => format!("{k} {}", e["delta"]),
                    k => k.to_string(),
                }
            })
            .collect();
        assert_eq!(
            shape,
            [
                "created",
                "in_progress",
                "output_item.added 0 \"reasoning\"",
                "content_part.added",
                "reasoning_text.delta \"Hmm.\"",
                "reasoning_text.done",
                "content_part.done",
                "output_item.done 0 \"reasoning\"",
                "output_item.added 1 \"message\"",
                "content_part.added",
                "output_text.delta \"OK.\"",
                "output_text.done",
                "content_part.done",
                "output_item.done 1 \"message\"",
                "output_item.added 2 \"function_call\"",
                "function_call_arguments.delta \"{}\"",
                "function_call_arguments.done",
                "output_item.done 2 \"function_call\"",
                "completed",
            ]
        );
        let done = &events[events.len() - 1]["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["summary"][0]["text"], "Hmm.");
        assert_eq!(done["output"][2]["call_id"], "call_k1_0");
        assert_eq!(
            done["usage"]["output_tokens_details"]["reasoning_tokens"],
            2
        );
    }

    /// A whole answer gets the items the stream would have made.
    #[test]
    fn a_whole_answer_has_the_streamed_items() {
        let text = "<think>Hmm.</think>\n\nOK.<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        let tools = crate::tools::CallReading::for_names(vec!["f".into()], false);
        let mut f = format(false);
        f.whole(text, FinishReason::Stop, Some((THINK, false)), &Some(tools));
        let whole = serde_json::to_value(f.finished(FinishReason::Stop, Usage::new(1, 2))).unwrap();
        let mut streamed = format(false);
        let mut events = Vec::new();
        events.extend(
            streamed
                .chunk(0, chunk(text, Some(FinishReason::Stop)))
                .unwrap(),
        );
        events.extend(streamed.usage(Usage::new(1, 2)));
        let last = &events[events.len() - 1]["response"];
        assert_eq!(whole["output"], last["output"]);
    }

    #[test]
    fn an_answer_cut_short_is_incomplete_and_so_are_its_items() {
        let mut f = format(false);
        f.splitter = None;
        let mut events = f.opening(1).unwrap();
        events.extend(
            f.chunk(0, chunk("Once upon", Some(FinishReason::Length)))
                .unwrap(),
        );
        events.extend(f.usage(Usage::new(1, 2)));
        let last = &events[events.len() - 1];
        assert_eq!(last["type"], "response.incomplete");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        assert_eq!(last["response"]["output"][0]["status"], "incomplete");
    }

    #[test]
    fn the_answer_becomes_the_stored_conversation_s_assistant_turn() {
        let mut f = format(false);
        f.whole(
            "<think>Hmm.</think>OK.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
            FinishReason::Stop,
            Some((THINK, false)),
            &Some(crate::tools::CallReading::for_names(vec!["f".into()], false)),
        );
        assert_eq!(
            assistant_turn(&f.output),
            json!({
                "role": "assistant",
                "content": "OK.",
                "reasoning_content": "Hmm.",
                "tool_calls": [{"id": "call_k1_0", "type": "function",
                                "function": {"name": "f", "arguments": "{\"a\":1}"}}],
            })
        );
    }
}
