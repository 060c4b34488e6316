//! A chat request's `messages`: each checked as OpenAI checks it, then rendered with the
//! model's chat template and tokenized.

use crate::error::ValidationError;
use crate::openai_types::{ChatMessageIn, ToolCallIn};
use braid_model::LoadedModel;
use braid_text::tool_calls::hermes;
use braid_text::{ChatMessage, ChatTemplate, PlainMarks};
use serde_json::{json, Map, Value};

type Result<T> = std::result::Result<T, ValidationError>;

/// Where a rendered conversation ends (vLLM's `add_generation_prompt` and
/// `continue_final_message`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChatEnd {
    /// With the assistant's turn opener: the answer is a new turn (the default).
    NewTurn,
    /// As the template closes the last message, with nothing after it.
    LastMessage,
    /// Inside the last message, an assistant's, where its content ends: the answer continues it.
    ContinueLast,
}

impl ChatEnd {
    pub fn of(
        add_generation_prompt: Option<bool>,
        continue_final_message: Option<bool>,
    ) -> Result<Self> {
        match (add_generation_prompt, continue_final_message.unwrap_or(false)) {
            (Some(true), true) => Err(ValidationError::Unsupported {
                field: "continue_final_message",
                reason: "with `add_generation_prompt: true`: a prompt either opens a new turn or continues the last; send `add_generation_prompt: false`",
            }),
            (_, true) => Ok(Self::ContinueLast),
            (Some(false), false) => Ok(Self::LastMessage),
            (_, false) => Ok(Self::NewTurn),
        }
    }
}

/// Renders `messages`, with `tools` (OpenAI's function objects) where the model may call
/// them, with the model's chat template, and tokenizes the result. A template that does not
/// render tools gets the conversation in the Hermes syntax as plain turns.
pub fn chat_prompt(
    messages: &[ChatMessageIn],
    tools: Option<&[Value]>,
    end: ChatEnd,
    model: &LoadedModel,
    special_in_messages: bool,
    variables: &Map<String, Value>,
) -> Result<Vec<u32>> {
    if messages.is_empty() {
        return Err(ValidationError::Empty { field: "messages" });
    }
    let mut msgs = messages
        .iter()
        .enumerate()
        .map(|(i, m)| chat_message(i, m))
        .collect::<Result<Vec<_>>>()?;
    answered_calls_exist(&msgs)?;
    // Control tokens typed in a message stay text, unless the server was told otherwise
    // (`--special-in-messages`): see braid-text's `plain_marks.rs`.
    let marks = PlainMarks::new();
    if !special_in_messages {
        for m in &mut msgs {
            let spans = model.tokenizer.control_spans(&m.content);
            if !spans.is_empty() {
                m.content = marks.mark(&m.content, &spans);
            }
        }
    }
    let continued = match end {
        ChatEnd::ContinueLast => Some((continued_content(&msgs)?, msgs.len() - 1)),
        _ => None,
    };
    let add_generation_prompt = end == ChatEnd::NewTurn;
    let template = chat_template(model)?;
    let rendered = if template.knows_tools() {
        template.render(&msgs, tools, add_generation_prompt, variables)
    } else {
        template.render(
            &hermes::describe_tools(msgs, tools),
            None,
            add_generation_prompt,
            variables,
        )
    };
    let mut text = rendered.map_err(|e| ValidationError::Template(e.to_string()))?;
    if let Some((content, index)) = continued {
        text = ending_inside(text, content, index)?;
    }
    let ids = model
        .tokenizer
        .encode_marked(&text, &marks)
        .map_err(|e| ValidationError::Tokenize(e.to_string()))?;
    let mut tokens = model.tokenizer.with_prompt_bos(ids);
    // Templates written for Hugging Face put `bos_token` in the text themselves; where the
    // tokenizer also adds BOS (a GGUF with add_bos_token, such as Gemma's), the prompt would
    // start with two, which the model never saw in training. One is dropped.
    if let Some(bos) = model.tokenizer.token_id(template.bos_token()) {
        if tokens.len() >= 2 && tokens[0] == bos && tokens[1] == bos {
            tokens.remove(0);
        }
    }
    if tokens.is_empty() {
        return Err(ValidationError::Empty { field: "messages" });
    }
    Ok(tokens)
}

/// The last message's content, which the answer continues: it must be the assistant's.
fn continued_content(msgs: &[ChatMessage]) -> Result<String> {
    let index = msgs.len() - 1;
    let last = &msgs[index];
    if last.role != "assistant" || last.content.is_empty() {
        return Err(ValidationError::InvalidMessage {
            index,
            reason: "is the message `continue_final_message` continues, so it must be an assistant message with content".into(),
        });
    }
    Ok(last.content.clone())
}

/// The rendered conversation cut where the last message's content ends, as vLLM cuts it: at
/// the content's last occurrence (templates that trim the content match without its trailing
/// whitespace), dropping the end-of-turn mark the template wrote after it.
fn ending_inside(mut text: String, content: String, index: usize) -> Result<String> {
    let end = [content.as_str(), content.trim_end()]
        .into_iter()
        .filter(|c| !c.is_empty())
        .find_map(|c| text.rfind(c).map(|at| at + c.len()))
        .ok_or_else(|| ValidationError::InvalidMessage {
            index,
            reason: "is the message `continue_final_message` continues, but the chat template does not render its content as written".into(),
        })?;
    text.truncate(end);
    Ok(text)
}

pub(super) fn chat_template(model: &LoadedModel) -> Result<&ChatTemplate> {
    model
        .chat_template
        .as_ref()
        .ok_or(ValidationError::NoChatTemplate)
}

/// The variables a chat request sets for the template: its `chat_template_kwargs`, and
/// `reasoning_effort` as a variable of that name. Each must be one the template reads; one it
/// does not would change nothing, so it is refused, naming it.
pub fn template_variables(
    kwargs: Option<&Map<String, Value>>,
    reasoning_effort: Option<&str>,
    model: &LoadedModel,
) -> Result<Map<String, Value>> {
    let template = chat_template(model)?;
    let mut variables = Map::new();
    let named = kwargs
        .into_iter()
        .flatten()
        .map(|(k, v)| (format!("chat_template_kwargs.{k}"), k.clone(), v.clone()))
        .chain(reasoning_effort.map(|e| {
            (
                "reasoning_effort".to_string(),
                "reasoning_effort".to_string(),
                json!(e),
            )
        }));
    for (param, name, value) in named {
        if !template.reads(&name) {
            let mut reads: Vec<&str> = template.variables().collect();
            reads.sort_unstable();
            return Err(ValidationError::TemplateVariable {
                param,
                name,
                reads: if reads.is_empty() {
                    "none".into()
                } else {
                    reads.join(", ")
                },
            });
        }
        variables.insert(name, value);
    }
    Ok(variables)
}

/// Every `tool` message answers a call an earlier assistant message made, as OpenAI checks.
fn answered_calls_exist(msgs: &[ChatMessage]) -> Result<()> {
    let mut made: Vec<&str> = Vec::new();
    for (index, m) in msgs.iter().enumerate() {
        for call in m.tool_calls.iter().flatten() {
            made.extend(call["id"].as_str());
        }
        if let Some(id) = &m.tool_call_id {
            if !made.contains(&id.as_str()) {
                return Err(ValidationError::InvalidMessage {
                    index,
                    reason: format!(
                        "answers the tool call `{id}`, which no earlier assistant message made"
                    ),
                });
            }
        }
    }
    Ok(())
}

fn chat_message(index: usize, m: &ChatMessageIn) -> Result<ChatMessage> {
    let bad = |reason: String| ValidationError::InvalidMessage { index, reason };
    let role = match m.role.as_deref() {
        // OpenAI's newer name for the system turn; templates know only `system`.
        Some("developer") => "system".to_string(),
        Some(r) if !r.is_empty() => r.to_string(),
        _ => {
            return Err(bad(
                "needs a `role` (\"system\", \"user\", \"assistant\" or \"tool\")".into(),
            ))
        }
    };
    let tool_call_id = match (&m.tool_call_id, role.as_str()) {
        (Some(id), "tool") if !id.is_empty() => Some(id.clone()),
        (_, "tool") => {
            return Err(bad(
                "is a `tool` message and needs the `tool_call_id` of the call it answers".into(),
            ))
        }
        (Some(_), _) => {
            return Err(bad(
                "has a `tool_call_id`, which only a `tool` message carries".into(),
            ))
        }
        (None, _) => None,
    };
    let tool_calls = match (&m.tool_calls, role.as_str()) {
        (None, _) => None,
        (Some(calls), _) if calls.is_empty() => None,
        (Some(calls), "assistant") => Some(
            calls
                .iter()
                .enumerate()
                .map(|(j, c)| tool_call(c).map_err(|reason| bad(format!("tool call {j} {reason}"))))
                .collect::<Result<Vec<_>>>()?,
        ),
        (Some(_), _) => {
            return Err(bad(
                "has `tool_calls`, which only an assistant message carries".into(),
            ))
        }
    };
    let content = match &m.content {
        Value::String(s) => s.clone(),
        // Only an assistant turn may come without text (OpenAI's rule: one that called tools).
        Value::Null if role == "assistant" => String::new(),
        Value::Null => {
            return Err(bad(format!(
                "needs `content`: a {role} message must say something"
            )))
        }
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => texts.push(t),
                    (Some("text"), None) => {
                        return Err(bad(format!("content part {j} has no `text` string")))
                    }
                    (Some(other), _) => {
                        return Err(bad(format!(
                            "content part {j} has type `{other}`; braid's models read text only"
                        )))
                    }
                    (None, _) => {
                        return Err(bad(format!("content part {j} needs a `type` (\"text\")")))
                    }
                }
            }
            texts.join("\n")
        }
        _ => {
            return Err(bad(
                "`content` must be a string or an array of text parts".into()
            ))
        }
    };
    let reasoning_content = match (&m.reasoning_content, role.as_str()) {
        (Some(r), "assistant") => Some(r.clone()),
        (Some(_), _) => {
            return Err(bad(
                "has `reasoning_content`, which only an assistant message carries".into(),
            ))
        }
        (None, _) => None,
    };
    Ok(ChatMessage {
        role,
        content,
        tool_calls,
        tool_call_id,
        reasoning_content,
    })
}

/// An assistant's call as templates read it: its arguments as an object.
fn tool_call(c: &ToolCallIn) -> std::result::Result<Value, String> {
    let id =
        c.id.as_deref()
            .filter(|id| !id.is_empty())
            .ok_or("needs an `id`, which `tool` messages answer")?;
    if c.kind.as_deref().is_some_and(|k| k != "function") {
        return Err("has a `type` other than `function`".into());
    }
    if c.function.name.is_empty() {
        return Err("needs a function `name`".into());
    }
    let arguments = match &c.function.arguments {
        Value::String(s) => serde_json::from_str::<Value>(s)
            .map_err(|e| format!("has `arguments` that are not JSON: {e}"))?,
        other => other.clone(),
    };
    if !arguments.is_object() {
        return Err("has `arguments` that are not a JSON object".into());
    }
    Ok(json!({"id": id, "type": "function",
        "function": {"name": c.function.name, "arguments": arguments}}))
}
