//! POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, as the
//! `anthropic` SDK and the agents built on it (Claude Code among them) speak it.
//!
//! A Messages request is a chat request in other words, so it is translated into one and runs
//! the chat path: the same template, tools prompt, call grammar, validation and engine. What
//! differs is said here: content blocks become chat messages (`tool_use` an assistant's call,
//! `tool_result` a tool message), `tool_choice` `any` is chat's `required`, and the answer
//! comes back as content blocks with Anthropic's `stop_reason`, streamed as its named events;
//! a reasoning model's reasoning is a thinking block before them.
//! `thinking` disabled switches a reasoning model's thinking off where its template can.
//! Whatever braid cannot honour (images, documents, server tools, `thinking` enabled) is a
//! 400 naming the field, in Anthropic's error shape (`app.rs` reshapes every error of these
//! routes).

use crate::anthropic_types::{
    BlockDelta, ContentBlock, CountTokensRequest, ErrorBody, MessageDelta, MessageIn, MessageOut,
    MessageUsage, MessagesRequest, OutputUsage, StreamEvent, TokenCount, ToolChoice,
    ToolDefinition,
};
use crate::error::ApiError;
use crate::generation::Chunk;
use crate::json_body::ApiJson;
use crate::openai_types::{ChatCompletionRequest, Usage};
use crate::request_origin::RequestOrigin;
use crate::routes::{admit, validated, Answer};
use crate::sse::StreamFormat;
use crate::state::AppState;
use crate::validation;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use braid_engine::FinishReason;
use braid_text::reasoning::{split_answer, Part, ReasoningSplitter};
use braid_text::tool_calls::{parse_answer, CallParser, ParsedCall, Piece};
use serde_json::{json, Map, Value};

pub async fn messages(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<MessagesRequest>,
) -> Result<Response, ApiError> {
    let origin = RequestOrigin::of("messages", &headers);
    let mut chat = to_chat(&req)?;
    thinking_off(&state, &req, &mut chat)?;
    let a = admit(&state, chat, validation::chat, &origin)
        .await
        .map_err(|e| e.renamed(ANTHROPIC_NAMES))?;
    let input_tokens = a.generations[0].usage().prompt_tokens;
    let tools = a.tools.clone();
    let reasoning = a.reasoning;
    let format = MessagesFormat {
        id: state.response_id("msg", a.generations[0].id),
        model: state.served_model_name.clone(),
        reader: tools.as_ref().map(|t| t.parser()),
        splitter: reasoning.map(|(syntax, inside)| ReasoningSplitter::new(syntax, inside)),
        input_tokens,
        open: None,
        next_block: 0,
        calls: 0,
        ending: None,
    };
    let (mut outs, usage, format) = match a.answer(&state, format).await? {
        Answer::Stream(response) => return Ok(response),
        Answer::Whole(choices, usage, format) => (choices, usage, format),
    };
    let out = outs.remove(0);
    let (thinking, reply) = match reasoning {
        Some((syntax, inside)) => split_answer(syntax, inside, &out.text),
        None => (None, out.text),
    };
    let (text, calls) = match &tools {
        Some(tools) => parse_answer(&mut tools.parser(), &reply),
        None => (Some(reply), Vec::new()),
    };
    let mut content: Vec<ContentBlock> = thinking
        .map(|thinking| ContentBlock::Thinking {
            thinking,
            signature: String::new(),
        })
        .into_iter()
        .collect();
    content.extend(
        text.filter(|t| !t.is_empty())
            .map(|text| ContentBlock::Text { text }),
    );
    let made_calls = !calls.is_empty();
    content.extend(
        calls
            .into_iter()
            .enumerate()
            .map(|(k, call)| format.tool_use(k, call)),
    );
    let (stop_reason, stop_sequence) = stop_reason(out.finish, out.stop_string, made_calls);
    Ok(Json(MessageOut {
        id: format.id,
        kind: "message",
        role: "assistant",
        model: format.model,
        content,
        stop_reason: Some(stop_reason),
        stop_sequence,
        usage: MessageUsage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
        },
    })
    .into_response())
}

pub async fn count_tokens(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CountTokensRequest>,
) -> Result<Json<TokenCount>, ApiError> {
    let full = MessagesRequest {
        model: req.model,
        max_tokens: Some(1),
        messages: req.messages,
        system: req.system,
        tools: req.tools,
        tool_choice: req.tool_choice,
        thinking: req.thinking,
        ..Default::default()
    };
    let mut chat = to_chat(&full)?;
    thinking_off(&state, &full, &mut chat)?;
    let (valid, _) = validated(&state, chat, validation::chat)
        .await
        .map_err(|e| e.renamed(ANTHROPIC_NAMES))?;
    Ok(Json(TokenCount {
        input_tokens: valid.prompt.len(),
    }))
}

/// The error in Anthropic's field names where they differ from chat's.
/// `thinking: {"type": "disabled"}` turns a reasoning model's thinking off where its template
/// has the switch (Qwen3's `enable_thinking`); a template without one decides alone, as it
/// does without the field.
fn thinking_off(
    state: &AppState,
    req: &MessagesRequest,
    chat: &mut ChatCompletionRequest,
) -> Result<(), ApiError> {
    if req.thinking.is_none() {
        return Ok(());
    }
    let model = state.ready()?.generator()?;
    let switch = "enable_thinking";
    if model
        .chat_template
        .as_ref()
        .is_some_and(|t| t.reads(switch))
    {
        chat.chat_template_kwargs
            .get_or_insert_with(Default::default)
            .insert(switch.into(), Value::Bool(false));
    }
    Ok(())
}

const ANTHROPIC_NAMES: &[(&str, &str)] = &[
    ("stop", "stop_sequences"),
    ("max_completion_tokens", "max_tokens"),
];

/// The chat request that asks for what `req` asks for, or the 400 naming what braid cannot
/// honour.
fn to_chat(req: &MessagesRequest) -> Result<ChatCompletionRequest, ApiError> {
    let max_tokens = req.max_tokens.ok_or_else(|| {
        ApiError::invalid(
            "max_tokens",
            "`max_tokens` is required (the most tokens to write)",
        )
    })?;
    if let Some(t) = req.temperature {
        if !(0.0..=1.0).contains(&t) {
            return Err(ApiError::invalid(
                "temperature",
                format!("`temperature` must be between 0 and 1; got {t}"),
            ));
        }
    }
    if let Some(thinking) = &req.thinking {
        if thinking.get("type").and_then(Value::as_str) != Some("disabled") {
            return Err(ApiError::unsupported(
                "thinking",
                "`thinking` can only be {\"type\": \"disabled\"} (or absent, when a reasoning \
                 model thinks as its chat template says, in thinking blocks): braid cannot hold a \
                 model's thinking to `budget_tokens`",
            ));
        }
    }
    if req.container.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(ApiError::unsupported(
            "container",
            "`container` asks for Anthropic's code execution, which braid does not run",
        ));
    }
    if req.speed.as_deref().is_some_and(|s| s != "standard") {
        return Err(ApiError::unsupported(
            "speed",
            "`speed` can only be `standard`: braid has one speed",
        ));
    }
    let empty = |v: &Value| {
        v.is_null()
            || v.as_object()
                .is_some_and(|o| o.values().all(Value::is_null))
    };
    if req.diagnostics.as_ref().is_some_and(|d| !empty(d)) {
        return Err(ApiError::unsupported(
            "diagnostics",
            "`diagnostics` asks for prompt-cache reports, which braid does not make",
        ));
    }
    let messages = req
        .messages
        .as_deref()
        .ok_or_else(|| ApiError::invalid("messages", "`messages` is required"))?;
    let mut chat = json!({
        "model": req.model,
        "max_tokens": max_tokens,
        "messages": conversation(req.system.as_ref(), messages)?,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "stop": req.stop_sequences,
        "stream": req.stream,
    });
    if req.stream == Some(true) {
        // The closing message_delta carries the output tokens.
        chat["stream_options"] = json!({"include_usage": true});
    }
    if let Some(config) = &req.output_config {
        if let Some(effort) = &config.effort {
            return Err(ApiError::unsupported(
                "output_config.effort",
                format!("`output_config.effort` `{effort}` cannot be honoured: braid's models do not reason at a chosen effort"),
            ));
        }
        if let Some(format) = config.format.as_ref().filter(|f| !f.is_null()) {
            chat["response_format"] = output_format(format)?;
        }
    }
    if let Some(tools) = &req.tools {
        chat["tools"] = tools
            .iter()
            .enumerate()
            .map(tool)
            .collect::<Result<Vec<_>, _>>()?
            .into();
    }
    if let Some(choice) = &req.tool_choice {
        let (choice, parallel) = tool_choice(choice)?;
        chat["tool_choice"] = choice;
        chat["parallel_tool_calls"] = parallel.into();
    }
    serde_json::from_value(chat).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Chat's `response_format` for `output_config.format`.
fn output_format(format: &Value) -> Result<Value, ApiError> {
    match (
        format.get("type").and_then(Value::as_str),
        format.get("schema"),
    ) {
        (Some("json_schema"), Some(schema)) if schema.is_object() => Ok(json!({
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": true},
        })),
        _ => Err(ApiError::invalid(
            "output_config.format",
            "`output_config.format` is {\"type\": \"json_schema\", \"schema\": {...}}",
        )),
    }
}

fn tool((i, t): (usize, &ToolDefinition)) -> Result<Value, ApiError> {
    if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
        return Err(ApiError::unsupported(
            format!("tools[{i}].type"),
            format!(
                "tool type `{kind}` is one of Anthropic's server tools, which braid does not run; \
                 declare the tool with an input_schema and run it yourself"
            ),
        ));
    }
    Ok(json!({
        "type": "function",
        "function": {
            "name": t.name,
            "description": t.description,
            "parameters": t.input_schema.clone().unwrap_or_else(|| json!({"type": "object"})),
        }
    }))
}

/// Chat's `tool_choice` and `parallel_tool_calls` for Anthropic's `tool_choice`.
fn tool_choice(c: &ToolChoice) -> Result<(Value, bool), ApiError> {
    let choice = match (c.kind.as_str(), c.name.as_deref()) {
        ("auto", _) => json!("auto"),
        ("any", _) => json!("required"),
        ("none", _) => json!("none"),
        ("tool", Some(name)) => json!({"type": "function", "function": {"name": name}}),
        ("tool", None) => {
            return Err(ApiError::invalid(
                "tool_choice.name",
                "`tool_choice` of type `tool` names the tool to call in `name`",
            ))
        }
        (other, _) => {
            return Err(ApiError::invalid(
                "tool_choice.type",
                format!("`tool_choice.type` is `auto`, `any`, `tool` or `none`; got `{other}`"),
            ))
        }
    };
    Ok((choice, !c.disable_parallel_tool_use.unwrap_or(false)))
}

/// The chat messages of a system prompt and a Messages conversation.
fn conversation(system: Option<&Value>, messages: &[MessageIn]) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    if let Some(system) = system {
        let parts = text_parts(system, "system")?;
        if !parts.is_empty() {
            out.push(json!({"role": "system", "content": parts}));
        }
    }
    for (i, m) in messages.iter().enumerate() {
        let field = format!("messages[{i}]");
        let blocks = blocks(&m.content, &format!("{field}.content"))?;
        match m.role.as_str() {
            "user" => user_turn(&blocks, &field, &mut out)?,
            "assistant" => out.push(assistant_turn(&blocks, &field)?),
            other => {
                return Err(ApiError::invalid(
                    format!("{field}.role"),
                    format!("`{field}.role` is `user` or `assistant`; got `{other}` (the system prompt goes in `system`)"),
                ))
            }
        }
    }
    Ok(out)
}

/// A content block, with where it is in the request (`messages[1].content[0]`).
type Block = (String, Map<String, Value>);

/// A content value as blocks: a string is one text block.
fn blocks(content: &Value, field: &str) -> Result<Vec<Block>, ApiError> {
    match content {
        Value::String(s) => Ok(vec![(
            field.to_string(),
            Map::from_iter([("type".into(), json!("text")), ("text".into(), json!(s))]),
        )]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(j, b)| {
                let at = format!("{field}[{j}]");
                match b {
                    Value::Object(o) => Ok((at, o.clone())),
                    _ => Err(ApiError::invalid(
                        at.clone(),
                        format!("`{at}` must be a content block object"),
                    )),
                }
            })
            .collect(),
        _ => Err(ApiError::invalid(
            field,
            format!("`{field}` must be a string or an array of content blocks"),
        )),
    }
}

/// The block's type, with every key it has checked against the ones braid reads for it.
fn block_kind<'a>(
    block: &'a Map<String, Value>,
    at: &str,
    allowed: &[(&str, &[&str])],
) -> Result<&'a str, ApiError> {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    let Some((_, keys)) = allowed.iter().find(|(k, _)| *k == kind) else {
        let known: Vec<&str> = allowed.iter().map(|(k, _)| *k).collect();
        return Err(ApiError::unsupported(
            format!("{at}.type"),
            format!(
                "content block type `{kind}` is not supported here (braid reads {}; its models take text only)",
                known.join(", ")
            ),
        ));
    };
    for key in block.keys() {
        // cache_control is a prompt-caching hint; braid's prefix cache matches by content.
        if key != "type" && key != "cache_control" && !keys.contains(&key.as_str()) {
            let null_citations = key == "citations" && block[key].is_null();
            if !null_citations {
                return Err(ApiError::unsupported(
                    format!("{at}.{key}"),
                    format!("`{at}.{key}` is not supported"),
                ));
            }
        }
    }
    Ok(kind)
}

fn text_of(block: &Map<String, Value>, at: &str) -> Result<String, ApiError> {
    block
        .get("text")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            ApiError::invalid(
                format!("{at}.text"),
                format!("`{at}.text` must be a string"),
            )
        })
}

/// A system prompt or tool result: a string or text blocks, as chat's text parts.
fn text_parts(content: &Value, field: &str) -> Result<Vec<Value>, ApiError> {
    blocks(content, field)?
        .iter()
        .map(|(at, b)| {
            block_kind(b, at, &[("text", &["text"])])?;
            Ok(json!({"type": "text", "text": text_of(b, at)?}))
        })
        .collect()
}

/// A user turn: its tool results as tool messages, its text as user messages, in order.
fn user_turn(blocks: &[Block], field: &str, out: &mut Vec<Value>) -> Result<(), ApiError> {
    if blocks.is_empty() {
        return Err(ApiError::invalid(
            format!("{field}.content"),
            format!("`{field}.content` is empty"),
        ));
    }
    let mut text: Vec<Value> = Vec::new();
    for (at, b) in blocks {
        let kind = block_kind(
            b,
            at,
            &[
                ("text", &["text"]),
                ("tool_result", &["tool_use_id", "content", "is_error"]),
            ],
        )?;
        if kind == "text" {
            text.push(json!({"type": "text", "text": text_of(b, at)?}));
            continue;
        }
        if !text.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(&mut text)}));
        }
        let id = b
            .get("tool_use_id")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("{at}.tool_use_id"),
                    format!("`{at}.tool_use_id` must be the id of the tool_use it answers"),
                )
            })?;
        let mut parts = match b.get("content") {
            None | Some(Value::Null) => Vec::new(),
            Some(c) => text_parts(c, &format!("{at}.content"))?,
        };
        // The model learns the call failed the way it would read it from a person.
        if b.get("is_error").and_then(Value::as_bool) == Some(true) {
            parts.insert(0, json!({"type": "text", "text": "Error: "}));
        }
        let content: String = parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("");
        out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
    }
    if !text.is_empty() {
        out.push(json!({"role": "user", "content": text}));
    }
    Ok(())
}

/// An assistant turn: its text and its calls.
fn assistant_turn(blocks: &[Block], field: &str) -> Result<Value, ApiError> {
    let mut text: Vec<Value> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    for (at, b) in blocks {
        let kind = block_kind(
            b,
            at,
            &[("text", &["text"]), ("tool_use", &["id", "name", "input"])],
        )?;
        if kind == "text" {
            text.push(json!({"type": "text", "text": text_of(b, at)?}));
            continue;
        }
        let (Some(id), Some(name)) = (
            b.get("id").and_then(Value::as_str),
            b.get("name").and_then(Value::as_str),
        ) else {
            return Err(ApiError::invalid(
                at.clone(),
                format!("`{at}` needs a string `id` and `name`"),
            ));
        };
        let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
        if !input.is_object() {
            return Err(ApiError::invalid(
                format!("{at}.input"),
                format!("`{at}.input` must be an object"),
            ));
        }
        calls.push(
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": input}}),
        );
    }
    let mut turn = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { text.into() }});
    if !calls.is_empty() {
        turn["tool_calls"] = calls.into();
    }
    if turn["content"].is_null() && turn.get("tool_calls").is_none() {
        return Err(ApiError::invalid(
            format!("{field}.content"),
            format!("`{field}.content` is empty"),
        ));
    }
    Ok(turn)
}

/// Anthropic's `stop_reason` (and the stop sequence that matched) for how the text ended.
fn stop_reason(
    finish: FinishReason,
    stop_string: Option<String>,
    made_calls: bool,
) -> (&'static str, Option<String>) {
    match finish {
        FinishReason::Length => ("max_tokens", None),
        FinishReason::Stop if made_calls => ("tool_use", None),
        FinishReason::Stop => match stop_string {
            Some(s) => ("stop_sequence", Some(s)),
            None => ("end_turn", None),
        },
    }
}

/// The message being written, as its stream of events.
struct MessagesFormat {
    id: String,
    model: String,
    /// With tools: how the answer is read for calls.
    reader: Option<CallParser>,
    /// A model that reasons: what splits its reasoning off.
    splitter: Option<ReasoningSplitter>,
    input_tokens: usize,
    /// The block being streamed, by index, and whether it is a thinking block.
    open: Option<(usize, bool)>,
    next_block: usize,
    calls: usize,
    /// How the text ended, for the closing message_delta.
    ending: Option<(&'static str, Option<String>)>,
}

impl MessagesFormat {
    /// Call `k` of the answer as a `tool_use` block; arguments that are not a JSON object
    /// (the call syntax reader passes only objects) would be an empty input.
    fn tool_use(&self, k: usize, call: ParsedCall) -> ContentBlock {
        ContentBlock::ToolUse {
            id: self.tool_use_id(k),
            name: call.name,
            input: serde_json::from_str(&call.arguments).unwrap_or_else(|_| json!({})),
        }
    }

    /// Call `k`'s id, unique to this message.
    fn tool_use_id(&self, k: usize) -> String {
        let response = self.id.rsplit('-').next().unwrap_or_default();
        format!("toolu_{response}_{k}")
    }

    fn close(&mut self, events: &mut Vec<StreamEvent>) {
        if let Some((index, _)) = self.open.take() {
            events.push(StreamEvent::ContentBlockStop { index });
        }
    }

    /// Streams `text` into the open block of its kind, opening one (and closing the other
    /// kind's) first.
    fn stream_text(&mut self, text: String, thinking: bool, events: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        let index = match self.open {
            Some((index, kind)) if kind == thinking => index,
            _ => {
                self.close(events);
                let index = self.next_block;
                self.next_block += 1;
                self.open = Some((index, thinking));
                let content_block = if thinking {
                    ContentBlock::Thinking {
                        thinking: String::new(),
                        signature: String::new(),
                    }
                } else {
                    ContentBlock::Text {
                        text: String::new(),
                    }
                };
                events.push(StreamEvent::ContentBlockStart {
                    index,
                    content_block,
                });
                index
            }
        };
        let delta = if thinking {
            BlockDelta::ThinkingDelta { thinking: text }
        } else {
            BlockDelta::TextDelta { text }
        };
        events.push(StreamEvent::ContentBlockDelta { index, delta });
    }
}

impl StreamFormat for MessagesFormat {
    type Json = Vec<StreamEvent>;

    fn opening(&mut self, _choices: usize) -> Option<Vec<StreamEvent>> {
        Some(vec![StreamEvent::MessageStart {
            message: MessageOut {
                id: self.id.clone(),
                kind: "message",
                role: "assistant",
                model: self.model.clone(),
                content: Vec::new(),
                stop_reason: None,
                stop_sequence: None,
                usage: MessageUsage {
                    input_tokens: self.input_tokens,
                    output_tokens: 0,
                },
            },
        }])
    }

    fn chunk(&mut self, _index: usize, chunk: Chunk) -> Option<Vec<StreamEvent>> {
        let mut events = Vec::new();
        let mut reply = chunk.text;
        if let Some(splitter) = self.splitter.as_mut() {
            let mut parts = splitter.push(&reply);
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
                Piece::Call(call) => {
                    self.close(&mut events);
                    // The arguments go whole in the one delta; the block opens empty.
                    let id = self.tool_use_id(self.calls);
                    self.calls += 1;
                    let index = self.next_block;
                    self.next_block += 1;
                    events.push(StreamEvent::ContentBlockStart {
                        index,
                        content_block: ContentBlock::ToolUse {
                            id,
                            name: call.name,
                            input: json!({}),
                        },
                    });
                    events.push(StreamEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::InputJsonDelta {
                            partial_json: call.arguments,
                        },
                    });
                    events.push(StreamEvent::ContentBlockStop { index });
                }
            }
        }
        if let Some(finish) = chunk.finish {
            self.close(&mut events);
            self.ending = Some(stop_reason(finish, chunk.stop_string, self.calls > 0));
        }
        (!events.is_empty()).then_some(events)
    }

    fn usage(&mut self, usage: Usage) -> Vec<StreamEvent> {
        let (stop_reason, stop_sequence) = self.ending.take().unwrap_or(("end_turn", None));
        vec![
            StreamEvent::MessageDelta {
                delta: MessageDelta {
                    stop_reason,
                    stop_sequence,
                },
                usage: OutputUsage {
                    output_tokens: usage.completion_tokens,
                },
            },
            StreamEvent::MessageStop,
        ]
    }

    fn events(item: &Vec<StreamEvent>) -> Vec<Event> {
        item.iter()
            .map(|e| {
                Event::default()
                    .event(e.name())
                    .json_data(e)
                    .unwrap_or_else(|err| Event::default().event("error").data(err.to_string()))
            })
            .collect()
    }

    fn error_event(error: &ApiError) -> Event {
        let body = ErrorBody::of_status(error.status.as_u16(), error.detail.message.clone());
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

    fn request(body: Value) -> MessagesRequest {
        serde_json::from_value(body).unwrap()
    }

    fn chat_json(body: Value) -> Value {
        let req = request(body);
        let max_tokens = req.max_tokens.unwrap();
        let system = req.system.as_ref();
        json!({
            "max_tokens": max_tokens,
            "messages": conversation(system, req.messages.as_deref().unwrap()).unwrap(),
        })
    }

    #[test]
    fn a_tool_round_trip_becomes_chat_messages() {
        let chat = chat_json(json!({
            "max_tokens": 5,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "down"}], "is_error": true},
                    {"type": "text", "text": "And now?"}
                ]}
            ]
        }));
        assert_eq!(
            chat["messages"],
            json!([
                {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}],
                 "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: down"},
                {"role": "user", "content": [{"type": "text", "text": "And now?"}]}
            ])
        );
    }

    #[test]
    fn tool_choice_maps_to_chat_s() {
        let choice = |v: Value| tool_choice(&serde_json::from_value(v).unwrap());
        assert_eq!(
            choice(json!({"type": "any"})).unwrap(),
            (json!("required"), true)
        );
        assert_eq!(
            choice(json!({"type": "tool", "name": "f", "disable_parallel_tool_use": true}))
                .unwrap(),
            (
                json!({"type": "function", "function": {"name": "f"}}),
                false
            )
        );
        assert_eq!(choice(json!({"type": "none"})).unwrap().0, json!("none"));
        assert_eq!(
            choice(json!({"type": "tool"}))
                .unwrap_err()
                .detail
                .param
                .as_deref(),
            Some("tool_choice.name")
        );
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let refused = |body: Value| to_chat(&request(body)).unwrap_err().detail.param.unwrap();
        let hi = json!([{"role": "user", "content": "hi"}]);
        assert_eq!(refused(json!({"messages": hi})), "max_tokens");
        assert_eq!(
            refused(
                json!({"max_tokens": 1, "messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]}]})
            ),
            "messages[0].content[0].type"
        );
        assert_eq!(
            refused(
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "text", "text": "a", "citations": [{}]}]}]})
            ),
            "messages[0].content[0].citations"
        );
        assert_eq!(
            refused(json!({"max_tokens": 1, "messages": [{"role": "user", "content": []}]})),
            "messages[0].content"
        );
        assert_eq!(
            refused(
                json!({"max_tokens": 1, "output_config": {"format": {"type": "json_schema"}}, "messages": hi})
            ),
            "output_config.format"
        );
        assert_eq!(
            refused(
                json!({"max_tokens": 1, "diagnostics": {"previous_message_id": "msg_1"}, "messages": hi})
            ),
            "diagnostics"
        );
    }

    /// The stream of an answer that reasons, then writes, then calls a tool, in pieces that
    /// split the tags: a thinking block, a text block and a tool_use block, each opened and
    /// closed in turn.
    #[test]
    fn a_reasoning_answer_streams_as_thinking_then_text_then_tool_use() {
        let mut f = MessagesFormat {
            id: "msg-1".into(),
            model: "m".into(),
            reader: Some(crate::tools::CallReading::for_names(vec!["f".into()], false).parser()),
            splitter: Some(ReasoningSplitter::new(braid_text::reasoning::THINK, false)),
            input_tokens: 3,
            open: None,
            next_block: 0,
            calls: 0,
            ending: None,
        };
        let chunk = |text: &str, finish: Option<FinishReason>| Chunk {
            text: text.into(),
            prompt_scored: Vec::new(),
            token: None,
            finish,
            stop_string: None,
        };
        let answer = [
            "<thi",
            "nk>Hmm.</th",
            "ink>\n\nOK.",
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
        ];
        let mut events: Vec<StreamEvent> = Vec::new();
        for (i, piece) in answer.iter().enumerate() {
            let finish = (i == answer.len() - 1).then_some(FinishReason::Stop);
            events.extend(f.chunk(0, chunk(piece, finish)).unwrap_or_default());
        }
        events.extend(f.usage(Usage::new(3, 9)));
        let shape: Vec<String> = events
            .iter()
            .map(|e| match e {
                StreamEvent::ContentBlockStart {
                    index,
                    content_block,
                } => {
                    format!(
                        "start {index} {}",
                        serde_json::to_value(content_block).unwrap()["type"]
                    )
                }
                StreamEvent::ContentBlockDelta { index, delta } => {
                    format!("delta {index} {}", serde_json::to_value(delta).unwrap())
                }
                other => other.name().to_string(),
            })
            .collect();
        assert_eq!(
            shape,
            [
                "start 0 \"thinking\"",
                "delta 0 {\"type\":\"thinking_delta\",\"thinking\":\"Hmm.\"}",
                "content_block_stop",
                "start 1 \"text\"",
                "delta 1 {\"type\":\"text_delta\",\"text\":\"OK.\"}",
                "content_block_stop",
                "start 2 \"tool_use\"",
                "delta 2 {\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        let StreamEvent::MessageDelta { delta, usage } = &events[events.len() - 2] else {
            unreachable!()
        };
        assert_eq!((delta.stop_reason, usage.output_tokens), ("tool_use", 9));
    }

    #[test]
    fn stop_reasons() {
        assert_eq!(
            stop_reason(FinishReason::Length, None, true),
            ("max_tokens", None)
        );
        assert_eq!(
            stop_reason(FinishReason::Stop, None, true),
            ("tool_use", None)
        );
        assert_eq!(
            stop_reason(FinishReason::Stop, None, false),
            ("end_turn", None)
        );
        assert_eq!(
            stop_reason(FinishReason::Stop, Some("END".into()), false),
            ("stop_sequence", Some("END".into()))
        );
    }
}
