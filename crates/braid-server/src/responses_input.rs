//! The Responses API's request as the chat request it means.
//!
//! Input items become chat messages: a `function_call` joins the assistant turn it belongs
//! to (as OpenAI's output lists a turn's text and calls as separate items), a
//! `function_call_output` is a tool message, and a `reasoning` item is the `reasoning_content`
//! of the assistant turn after it, which the chat template reads or drops as the model was
//! trained. Function tools, `tool_choice`, `text.format` and `reasoning.effort` become chat's
//! fields; what chat cannot express (hosted tools, images, background runs, truncation) is a
//! 400 naming the field, and so is every key of an item braid does not read.

use crate::error::ApiError;
use crate::openai_types::ChatCompletionRequest;
use crate::responses_types::ResponsesRequest;
use serde_json::{json, Map, Value};

/// The error in the Responses API's field names where they differ from chat's.
pub(crate) const RESPONSES_NAMES: &[(&str, &str)] = &[
    ("max_completion_tokens", "max_output_tokens"),
    ("max_tokens", "max_output_tokens"),
    ("response_format", "text.format"),
    ("reasoning_effort", "reasoning.effort"),
    ("messages", "input"),
];

/// What the request asks of the output beyond the chat request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Options {
    /// `reasoning.summary`: the reasoning goes in the item's summary too.
    pub summary: bool,
    /// `include: ["reasoning.encrypted_content"]`.
    pub encrypted_reasoning: bool,
}

impl Options {
    pub fn of(req: &ResponsesRequest) -> Result<Self, ApiError> {
        let mut options = Options::default();
        if let Some(r) = &req.reasoning {
            for (param, value) in [
                ("reasoning.summary", &r.summary),
                ("reasoning.generate_summary", &r.generate_summary),
            ] {
                match value.as_deref() {
                    None => {}
                    Some("auto" | "detailed") => options.summary = true,
                    Some(other) => {
                        return Err(ApiError::unsupported(
                            param,
                            format!(
                                "`{param}` `{other}` cannot be honoured: braid does not summarize \
                                 reasoning; `auto` or `detailed` give the whole reasoning as its summary"
                            ),
                        ))
                    }
                }
            }
        }
        for wanted in req.include.iter().flatten() {
            match wanted.as_str() {
                "reasoning.encrypted_content" => options.encrypted_reasoning = true,
                other => {
                    return Err(ApiError::unsupported(
                        "include",
                        format!(
                            "`include` `{other}` cannot be honoured; braid adds only \
                             `reasoning.encrypted_content`"
                        ),
                    ))
                }
            }
        }
        Ok(options)
    }
}

/// The chat request that asks for what `req` asks for, with `conversation` as its messages
/// after the instructions; or the 400 naming what braid cannot honour.
pub(crate) fn to_chat(
    req: &ResponsesRequest,
    conversation: &[Value],
) -> Result<ChatCompletionRequest, ApiError> {
    if req.background == Some(true) {
        return Err(ApiError::unsupported(
            "background",
            "`background: true` cannot be honoured: braid answers while the client waits",
        ));
    }
    for (param, value, what) in [
        (
            "conversation",
            &req.conversation,
            "OpenAI's Conversations API, which braid does not have; send the conversation in \
             `input` or continue one with `previous_response_id`",
        ),
        (
            "prompt",
            &req.prompt,
            "OpenAI's stored prompt templates, which braid does not have",
        ),
    ] {
        if value.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(ApiError::unsupported(
                param,
                format!("`{param}` asks for {what}"),
            ));
        }
    }
    match req.truncation.as_deref() {
        None | Some("disabled") => {}
        Some("auto") => {
            return Err(ApiError::unsupported(
                "truncation",
                "`truncation: auto` cannot be honoured: braid refuses a conversation that does \
                 not fit rather than dropping its start",
            ))
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "truncation",
                format!("`truncation` is `auto` or `disabled`; got `{other}`"),
            ))
        }
    }
    if req
        .stream_options
        .as_ref()
        .and_then(|o| o.include_obfuscation)
        == Some(true)
    {
        return Err(ApiError::unsupported(
            "stream_options.include_obfuscation",
            "`stream_options.include_obfuscation: true` cannot be honoured: braid pads no events",
        ));
    }
    if let Some(metadata) = &req.metadata {
        check_metadata(metadata)?;
    }
    let mut messages = Vec::new();
    if let Some(instructions) = req.instructions.as_ref().filter(|i| !i.is_empty()) {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    messages.extend(conversation.iter().cloned());
    if conversation.is_empty() {
        return Err(ApiError::invalid(
            "input",
            "`input` is required: a string or an array of input items",
        ));
    }
    let mut chat = json!({
        "model": req.model,
        "messages": messages,
        "max_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "stream": req.stream,
        "parallel_tool_calls": req.parallel_tool_calls,
    });
    if req.stream == Some(true) {
        // The closing response.completed carries the usage.
        chat["stream_options"] = json!({"include_usage": true});
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
        chat["tool_choice"] = tool_choice(choice)?;
    }
    if let Some(text) = &req.text {
        if let Some(format) = text.format.as_ref().filter(|f| !f.is_null()) {
            if let Some(format) = response_format(format)? {
                chat["response_format"] = format;
            }
        }
        match text.verbosity.as_deref() {
            None | Some("medium") => {}
            Some(other) => {
                return Err(ApiError::unsupported(
                    "text.verbosity",
                    format!("`text.verbosity` `{other}` cannot be honoured: braid's models have no verbosity control"),
                ))
            }
        }
    }
    if let Some(kwargs) = &req.chat_template_kwargs {
        chat["chat_template_kwargs"] = json!(kwargs);
    }
    if let Some(effort) = req.reasoning.as_ref().and_then(|r| r.effort.as_ref()) {
        chat["reasoning_effort"] = json!(effort);
    }
    serde_json::from_value(chat).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// OpenAI's rule for `metadata`: at most 16 pairs of strings, keys up to 64 characters and
/// values up to 512.
fn check_metadata(metadata: &Map<String, Value>) -> Result<(), ApiError> {
    if metadata.len() > 16 {
        return Err(ApiError::invalid(
            "metadata",
            format!("`metadata` holds at most 16 pairs; got {}", metadata.len()),
        ));
    }
    for (key, value) in metadata {
        let fits =
            key.chars().count() <= 64 && value.as_str().is_some_and(|v| v.chars().count() <= 512);
        if !fits {
            return Err(ApiError::invalid(
                format!("metadata.{key}"),
                "`metadata` keys are strings of up to 64 characters and values strings of up to 512",
            ));
        }
    }
    Ok(())
}

/// Chat's `response_format` for `text.format` (None for plain text).
fn response_format(format: &Value) -> Result<Option<Value>, ApiError> {
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let schema = format
                .get("schema")
                .filter(|s| s.is_object())
                .ok_or_else(|| {
                    ApiError::invalid(
                        "text.format.schema",
                        "`text.format` of type `json_schema` needs `schema`, a JSON Schema object",
                    )
                })?;
            let name = format
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("output");
            Ok(Some(json!({
                "type": "json_schema",
                "json_schema": {
                    "name": name,
                    "schema": schema,
                    "strict": format.get("strict").cloned().unwrap_or(Value::Null),
                    "description": format.get("description").cloned().unwrap_or(Value::Null),
                },
            })))
        }
        other => Err(ApiError::invalid(
            "text.format.type",
            format!(
                "`text.format.type` is `text`, `json_object` or `json_schema`; got {}",
                other.map_or("none".to_string(), |o| format!("`{o}`"))
            ),
        )),
    }
}

/// Chat's tool for a Responses function tool; hosted tools are refused by name.
fn tool((i, t): (usize, &Value)) -> Result<Value, ApiError> {
    let at = format!("tools[{i}]");
    let object = t
        .as_object()
        .ok_or_else(|| ApiError::invalid(&at, format!("`{at}` must be a tool object")))?;
    match object.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some(kind) => {
            return Err(ApiError::unsupported(
                format!("{at}.type"),
                format!(
                    "tool type `{kind}` is one of OpenAI's hosted tools, which braid does not run; \
                     declare a `function` tool and run it yourself"
                ),
            ))
        }
        None => {
            return Err(ApiError::invalid(
                format!("{at}.type"),
                format!("`{at}.type` is required (`function`)"),
            ))
        }
    }
    for key in object.keys() {
        if !["type", "name", "description", "parameters", "strict"].contains(&key.as_str()) {
            return Err(ApiError::unsupported(
                format!("{at}.{key}"),
                format!("`{at}.{key}` is not supported"),
            ));
        }
    }
    let name = object.get("name").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid(
            format!("{at}.name"),
            format!("`{at}.name` must be the function's name"),
        )
    })?;
    Ok(json!({
        "type": "function",
        "function": {
            "name": name,
            "description": object.get("description"),
            "parameters": object.get("parameters").filter(|p| !p.is_null()),
            // Strict unless the tool says otherwise, as OpenAI's Responses API has it.
            "strict": object.get("strict").and_then(Value::as_bool).unwrap_or(true),
        }
    }))
}

/// Chat's `tool_choice` for the Responses API's.
fn tool_choice(choice: &Value) -> Result<Value, ApiError> {
    match choice {
        Value::String(s) if ["auto", "none", "required"].contains(&s.as_str()) => {
            Ok(choice.clone())
        }
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = o.get("name").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid(
                        "tool_choice.name",
                        "`tool_choice` of type `function` names the function in `name`",
                    )
                })?;
                Ok(json!({"type": "function", "function": {"name": name}}))
            }
            Some(kind) => Err(ApiError::unsupported(
                "tool_choice.type",
                format!(
                    "`tool_choice` of type `{kind}` cannot be honoured: braid chooses among \
                     function tools with `auto`, `none`, `required` or `{{\"type\": \"function\", \
                     \"name\": ...}}`"
                ),
            )),
            None => Err(ApiError::invalid("tool_choice.type", "`tool_choice.type` is required")),
        },
        _ => Err(ApiError::invalid(
            "tool_choice",
            "`tool_choice` is `auto`, `none`, `required` or `{\"type\": \"function\", \"name\": ...}`",
        )),
    }
}

/// The chat messages of `input`: a string is one user message; items are read in order.
pub(crate) fn conversation_of(input: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    let items = match input {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => return Ok(vec![json!({"role": "user", "content": s})]),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ApiError::invalid(
                "input",
                "`input` must be a string or an array of input items",
            ))
        }
    };
    let mut out: Vec<Value> = Vec::new();
    // A reasoning item belongs to the assistant turn that follows it.
    let mut reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let item = item.as_object().ok_or_else(|| {
            ApiError::invalid(&at, format!("`{at}` must be an input item object"))
        })?;
        let kind = match item.get("type").and_then(Value::as_str) {
            Some(kind) => kind,
            // An easy input message: `{"role": ..., "content": ...}`.
            None if item.contains_key("role") => "message",
            None => {
                return Err(ApiError::invalid(
                    format!("{at}.type"),
                    format!("`{at}` needs a `type` (or a `role`, for a message)"),
                ))
            }
        };
        match kind {
            "message" => {
                only_keys(item, &at, &["type", "role", "content", "id", "status"])?;
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                let content = item.get("content").unwrap_or(&Value::Null);
                match role {
                    "user" | "system" | "developer" => {
                        let text = input_text(content, &format!("{at}.content"), role)?;
                        out.push(json!({"role": role, "content": text}));
                    }
                    "assistant" => {
                        let text = output_text(content, &format!("{at}.content"))?;
                        let mut message = json!({"role": "assistant", "content": text});
                        if let Some(r) = reasoning.take() {
                            message["reasoning_content"] = json!(r);
                        }
                        out.push(message);
                    }
                    other => {
                        return Err(ApiError::invalid(
                            format!("{at}.role"),
                            format!("`{at}.role` is `user`, `system`, `developer` or `assistant`; got `{other}`"),
                        ))
                    }
                }
            }
            "function_call" => {
                only_keys(
                    item,
                    &at,
                    &["type", "call_id", "name", "arguments", "id", "status"],
                )?;
                let field = |key: &str| {
                    item.get(key).and_then(Value::as_str).ok_or_else(|| {
                        ApiError::invalid(
                            format!("{at}.{key}"),
                            format!("`{at}.{key}` must be a string"),
                        )
                    })
                };
                let call = json!({
                    "id": field("call_id")?,
                    "type": "function",
                    "function": {"name": field("name")?, "arguments": field("arguments")?},
                });
                // Calls join the assistant turn just written; otherwise they are a turn.
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" && reasoning.is_none() => {
                        match last["tool_calls"].as_array_mut() {
                            Some(calls) => calls.push(call),
                            None => last["tool_calls"] = json!([call]),
                        }
                    }
                    _ => {
                        let mut message =
                            json!({"role": "assistant", "content": null, "tool_calls": [call]});
                        if let Some(r) = reasoning.take() {
                            message["reasoning_content"] = json!(r);
                        }
                        out.push(message);
                    }
                }
            }
            "function_call_output" => {
                only_keys(item, &at, &["type", "call_id", "output", "id", "status"])?;
                let call_id = item.get("call_id").and_then(Value::as_str).ok_or_else(|| {
                    ApiError::invalid(
                        format!("{at}.call_id"),
                        format!("`{at}.call_id` must be the `call_id` of the call it answers"),
                    )
                })?;
                let output = input_text(
                    item.get("output").unwrap_or(&Value::Null),
                    &format!("{at}.output"),
                    "tool",
                )?;
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            "reasoning" => {
                only_keys(
                    item,
                    &at,
                    &[
                        "type",
                        "id",
                        "summary",
                        "content",
                        "encrypted_content",
                        "status",
                    ],
                )?;
                reasoning = Some(reasoning_text(item));
            }
            other => {
                return Err(ApiError::unsupported(
                    format!("{at}.type"),
                    format!(
                        "input item type `{other}` is not supported (braid reads message, \
                         function_call, function_call_output and reasoning items)"
                    ),
                ))
            }
        }
    }
    Ok(out)
}

fn only_keys(item: &Map<String, Value>, at: &str, keys: &[&str]) -> Result<(), ApiError> {
    match item.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(key) => Err(ApiError::unsupported(
            format!("{at}.{key}"),
            format!("`{at}.{key}` is not supported"),
        )),
        None => Ok(()),
    }
}

/// A reasoning item's text: its reasoning, else what braid gave as its encrypted content,
/// else its summary.
fn reasoning_text(item: &Map<String, Value>) -> String {
    let texts = |key: &str| -> Option<String> {
        let parts = item.get(key)?.as_array()?;
        let text: Vec<&str> = parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        (!text.is_empty()).then(|| text.join("\n"))
    };
    texts("content")
        .or_else(|| {
            item.get("encrypted_content")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .or_else(|| texts("summary"))
        .unwrap_or_default()
}

/// The text of a user, system or tool content: a string, or `input_text` parts.
fn input_text(content: &Value, at: &str, role: &str) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let here = format!("{at}[{j}]");
                match part.get("type").and_then(Value::as_str) {
                    Some("input_text") => texts.push(part_text(part, &here, "text")?),
                    other => {
                        return Err(ApiError::unsupported(
                            format!("{here}.type"),
                            format!(
                                "{role} content part type {} is not supported: braid's models \
                                 read text (`input_text`) only",
                                other.map_or("none".to_string(), |o| format!("`{o}`"))
                            ),
                        ))
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(ApiError::invalid(
            at,
            format!("`{at}` must be a string or an array of `input_text` parts"),
        )),
    }
}

/// The text of an assistant message's content: a string, or `output_text` (and `refusal`)
/// parts.
fn output_text(content: &Value, at: &str) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let here = format!("{at}[{j}]");
                match part.get("type").and_then(Value::as_str) {
                    Some("output_text" | "input_text") => {
                        texts.push(part_text(part, &here, "text")?)
                    }
                    Some("refusal") => texts.push(part_text(part, &here, "refusal")?),
                    other => {
                        return Err(ApiError::unsupported(
                            format!("{here}.type"),
                            format!(
                                "assistant content part type {} is not supported (braid reads \
                                 `output_text` and `refusal`)",
                                other.map_or("none".to_string(), |o| format!("`{o}`"))
                            ),
                        ))
                    }
                }
            }
            Ok(texts.join(""))
        }
        _ => Err(ApiError::invalid(
            at,
            format!("`{at}` must be a string or an array of `output_text` parts"),
        )),
    }
}

fn part_text(part: &Value, at: &str, key: &str) -> Result<String, ApiError> {
    part.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            ApiError::invalid(
                format!("{at}.{key}"),
                format!("`{at}.{key}` must be a string"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(input: Value) -> Vec<Value> {
        conversation_of(Some(&input)).unwrap()
    }

    fn refused(body: Value) -> String {
        let req: ResponsesRequest = serde_json::from_value(body).unwrap();
        let conversation = conversation_of(req.input.as_ref());
        let error = match conversation {
            Err(e) => e,
            Ok(c) => match Options::of(&req).and_then(|_| to_chat(&req, &c)) {
                Err(e) => e,
                Ok(_) => panic!("accepted"),
            },
        };
        error.detail.param.unwrap()
    }

    /// A turn's reasoning, text and calls (separate items in OpenAI's output) are one
    /// assistant message, and the calls' outputs are tool messages.
    #[test]
    fn a_function_call_round_trip_becomes_chat_messages() {
        assert_eq!(
            items(json!([
                {"role": "developer", "content": "Be brief."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Hmm."}]},
                {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                 "content": [{"type": "output_text", "text": "Looking.", "annotations": [], "logprobs": []}]},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}", "id": "fc_1", "status": "completed"},
                {"type": "function_call", "call_id": "c2", "name": "w", "arguments": "{\"a\":1}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
            ])),
            vec![
                json!({"role": "developer", "content": "Be brief."}),
                json!({"role": "user", "content": "Weather?"}),
                json!({"role": "assistant", "content": "Looking.", "reasoning_content": "Hmm.",
                       "tool_calls": [
                           {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}},
                           {"id": "c2", "type": "function", "function": {"name": "w", "arguments": "{\"a\":1}"}}]}),
                json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"}),
                json!({"role": "tool", "tool_call_id": "c2", "content": "rain"}),
            ]
        );
    }

    /// Reasoning then a call with no text: the call opens the turn and carries the reasoning.
    #[test]
    fn a_call_after_reasoning_opens_its_own_turn() {
        let out = items(json!([
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "Think."},
            {"type": "function_call", "call_id": "c", "name": "w", "arguments": "{}"},
        ]));
        assert_eq!(out[1]["role"], "assistant");
        assert_eq!(out[1]["reasoning_content"], "Think.");
        assert_eq!(out[1]["content"], Value::Null);
        assert_eq!(out[1]["tool_calls"][0]["id"], "c");
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let hi = json!("hi");
        assert_eq!(
            refused(json!({"input": hi, "tools": [{"type": "file_search"}]})),
            "tools[0].type"
        );
        assert_eq!(
            refused(
                json!({"input": hi, "tools": [{"type": "function", "name": "f", "defer_loading": true}]})
            ),
            "tools[0].defer_loading"
        );
        assert_eq!(
            refused(json!({"input": [{"role": "user", "content": "a", "name": "x"}]})),
            "input[0].name"
        );
        assert_eq!(
            refused(json!({"input": [{"type": "function_call_output", "output": "x"}]})),
            "input[0].call_id"
        );
        assert_eq!(
            refused(json!({"input": hi, "text": {"format": {"type": "json_schema", "name": "x"}}})),
            "text.format.schema"
        );
        assert_eq!(
            refused(
                json!({"input": hi, "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}})
            ),
            "tool_choice.type"
        );
        assert_eq!(refused(json!({"input": []})), "input");
        assert_eq!(
            refused(json!({"input": hi, "metadata": {"k": "v".repeat(513)}})),
            "metadata.k"
        );
    }

    #[test]
    fn function_tools_are_strict_unless_they_say_otherwise() {
        let req: ResponsesRequest = serde_json::from_value(json!({
            "input": "hi",
            "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g", "strict": false}],
            "tool_choice": {"type": "function", "name": "g"},
            "text": {"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}}},
        }))
        .unwrap();
        let chat = to_chat(&req, &items(json!("hi"))).unwrap();
        let tools = chat.tools.unwrap();
        assert_eq!(tools[0].function.strict, Some(true));
        assert_eq!(tools[1].function.strict, Some(false));
        assert_eq!(
            chat.tool_choice.unwrap(),
            json!({"type": "function", "function": {"name": "g"}})
        );
    }
}
