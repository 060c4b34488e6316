//! Raw request → `ValidatedRequest`, in one place (Hugging Face TGI's pattern).
//!
//! Every way a request can be wrong is a variant of `ValidationError`; each message names the
//! field and the bound, and `status()` maps each variant to one HTTP status. The engine only
//! ever sees validated values: a finite temperature in range, token ids inside the vocabulary,
//! a prompt plus `max_tokens` that fits the context.

use crate::openai_types::ResponseFormat;
use crate::openai_types::{
    ChatCompletionRequest, ChatMessageIn, CompletionRequest, SamplingFields,
};
use crate::tools::{tool_calling, CallReading, ToolCalling};
use axum::http::StatusCode;
use braid_model::{LoadedModel, SamplingParams};
use braid_text::tool_calls::hermes;
use braid_text::{ChatMessage, ChatTemplate, Constraint, TokenConstraint};
use serde_json::{json, Value};

/// Request bounds from the model and the server's flags.
#[derive(Clone, Debug)]
pub struct Limits {
    pub served_model_name: String,
    pub context_length: usize,
    pub vocab_size: usize,
    /// Upper bound for `max_tokens` (at most the context length).
    pub max_tokens_cap: usize,
    pub max_stop_strings: usize,
    pub max_stop_string_len: usize,
    /// Longest prompt accepted, in tokens (at most the context length).
    pub max_prompt_tokens: usize,
}

/// What the handlers and the engine work from.
#[derive(Clone, Debug)]
pub struct ValidatedRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub params: SamplingParams,
    pub stop_strings: Vec<String>,
    /// Sampling one of these ends generation (empty with `ignore_eos` and no `stop_token_ids`).
    pub stop_token_ids: Vec<u32>,
    pub stream: bool,
    pub include_usage: bool,
    /// Completions with `echo`: the prompt's text, prepended to the answer.
    pub echo: Option<String>,
    /// Alternatives to report with each token, when logprobs were asked for.
    pub logprobs: Option<usize>,
    /// The prompt's tokens are scored too, with this many alternatives each: completions
    /// with `echo` and `logprobs`, or `prompt_logprobs`.
    pub score_prompt: Option<usize>,
    /// vLLM's `prompt_logprobs`: alternatives to report with each prompt token.
    pub prompt_logprobs: Option<usize>,
    /// The other prompts of a completions prompt array, each with its `echo` text.
    pub more_prompts: Vec<(Vec<u32>, Option<String>)>,
    /// Choices per prompt (`n`).
    pub n: usize,
    /// The structured output's grammar, compiled and at its start.
    pub constraint: Option<TokenConstraint>,
    /// Chat with tools: how each choice's answer is read for calls.
    pub tools: Option<CallReading>,
}

/// Most choices per prompt (`n`).
pub const MAX_N: usize = 16;
/// Most choices per request: prompts in the array times `n`.
pub const MAX_CHOICES: usize = 64;

impl ValidatedRequest {
    /// One request per choice, in OpenAI's order (prompt by prompt, `n` for each): choice `j`
    /// of a prompt samples with `seed + j`, so the choices differ and each is reproducible.
    pub fn choices(mut self) -> Vec<ValidatedRequest> {
        let n = std::mem::replace(&mut self.n, 1);
        let more = std::mem::take(&mut self.more_prompts);
        let first = (self.prompt.clone(), self.echo.clone());
        let mut out = Vec::with_capacity((1 + more.len()) * n);
        for (prompt, echo) in std::iter::once(first).chain(more) {
            for j in 0..n {
                let mut choice = self.clone();
                choice.prompt = prompt.clone();
                choice.echo = echo.clone();
                choice.params.seed = self.params.seed.map(|s| s.wrapping_add(j as u64));
                out.push(choice);
            }
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    #[error("the model `{requested}` does not exist; this server serves `{served}`")]
    ModelNotFound { requested: String, served: String },
    #[error("`{field}` is required")]
    Missing { field: &'static str },
    #[error("`{field}` must be a finite number, got {got}")]
    NotFinite { field: &'static str, got: f64 },
    #[error("`{field}` must be {bound}, got {got}")]
    OutOfRange {
        field: &'static str,
        bound: String,
        got: String,
    },
    #[error("`{field}` must not be empty")]
    Empty { field: &'static str },
    #[error("`{field}` must be {expected}")]
    WrongShape {
        field: &'static str,
        expected: &'static str,
    },
    #[error("give exactly one of `{first}` and `{second}`")]
    ExactlyOne {
        first: &'static str,
        second: &'static str,
    },
    #[error("`{field}` is not supported: {reason}")]
    Unsupported {
        field: &'static str,
        reason: &'static str,
    },
    #[error("{prompts} prompts × `n` {n} = {total} choices; at most {MAX_CHOICES} per request", total = .prompts * .n)]
    TooManyChoices { prompts: usize, n: usize },
    #[error("give at most one of `{first}` and `{second}`: a request's output follows one format")]
    TwoConstraints {
        first: &'static str,
        second: &'static str,
    },
    #[error("`{field}` cannot be enforced: {problem}")]
    Grammar {
        field: &'static str,
        problem: String,
    },
    #[error("`{field}` has token id {id}, outside the vocabulary of {vocab} tokens (ids 0 to {last})", last = .vocab - 1)]
    TokenOutOfVocab {
        field: &'static str,
        id: i64,
        vocab: usize,
    },
    #[error("`stop` holds {count} strings; at most {max} are allowed")]
    TooManyStops { count: usize, max: usize },
    #[error("`stop` string {index} is {len} bytes long; at most {max} are allowed")]
    StopTooLong {
        index: usize,
        len: usize,
        max: usize,
    },
    #[error("`{param}` {reason}")]
    InvalidTool { param: String, reason: String },
    #[error("`messages[{index}]` {reason}")]
    InvalidMessage { index: usize, reason: String },
    #[error("`messages` cannot be rendered with the model's chat template: {0}")]
    Template(String),
    #[error("this model has no chat template (its GGUF has no `tokenizer.chat_template`, as base models usually do not), so `messages` cannot be turned into a prompt; send the text as a `prompt` to /v1/completions, or start the server with `braid serve --chat-template FILE` to supply a Jinja chat template")]
    NoChatTemplate,
    #[error("the prompt cannot be tokenized: {0}")]
    Tokenize(String),
    #[error("prompt ({prompt} tokens) + {field} ({max_tokens}) = {total} exceeds the model's context of {context} tokens", total = .prompt + .max_tokens)]
    ContextOverflow {
        field: &'static str,
        prompt: usize,
        max_tokens: usize,
        context: usize,
    },
    #[error("the prompt ({prompt} tokens) fills the model's context of {context} tokens and leaves no room for a completion")]
    PromptFillsContext { prompt: usize, context: usize },
    #[error("`{field}` is {prompt} tokens long; this server accepts prompts of at most {max} tokens (--max-prompt-tokens)")]
    PromptTooLong {
        field: &'static str,
        prompt: usize,
        max: usize,
    },
}

impl ValidationError {
    /// The one place a validation failure becomes an HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ValidationError::ModelNotFound { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// OpenAI's `param`: the offending field.
    pub fn param(&self) -> Option<&str> {
        match self {
            ValidationError::ModelNotFound { .. } => Some("model"),
            ValidationError::Missing { field }
            | ValidationError::NotFinite { field, .. }
            | ValidationError::OutOfRange { field, .. }
            | ValidationError::Empty { field }
            | ValidationError::WrongShape { field, .. }
            | ValidationError::Unsupported { field, .. }
            | ValidationError::TokenOutOfVocab { field, .. }
            | ValidationError::ContextOverflow { field, .. }
            | ValidationError::PromptTooLong { field, .. }
            | ValidationError::ExactlyOne { first: field, .. }
            | ValidationError::TwoConstraints { second: field, .. }
            | ValidationError::Grammar { field, .. } => Some(field),
            ValidationError::TooManyChoices { .. }
            | ValidationError::PromptFillsContext { .. }
            | ValidationError::Tokenize(_) => Some("prompt"),
            ValidationError::TooManyStops { .. } | ValidationError::StopTooLong { .. } => {
                Some("stop")
            }
            ValidationError::InvalidTool { param, .. } => Some(param),
            ValidationError::InvalidMessage { .. }
            | ValidationError::Template(_)
            | ValidationError::NoChatTemplate => Some("messages"),
        }
    }

    /// OpenAI's `code`, where OpenAI has one for the case.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ValidationError::ModelNotFound { .. } => Some("model_not_found"),
            ValidationError::ContextOverflow { .. }
            | ValidationError::PromptFillsContext { .. } => Some("context_length_exceeded"),
            ValidationError::PromptTooLong { .. } => Some("prompt_too_long"),
            ValidationError::NoChatTemplate => Some("no_chat_template"),
            _ => None,
        }
    }
}

type Result<T> = std::result::Result<T, ValidationError>;

/// A request naming another model is refused; omitting `model` is fine.
pub fn check_model(requested: Option<&str>, limits: &Limits) -> Result<()> {
    match requested {
        Some(m) if !m.is_empty() && m != limits.served_model_name => {
            Err(ValidationError::ModelNotFound {
                requested: m.to_string(),
                served: limits.served_model_name.clone(),
            })
        }
        _ => Ok(()),
    }
}

pub fn completion(
    req: &CompletionRequest,
    model: &LoadedModel,
    limits: &Limits,
) -> Result<ValidatedRequest> {
    check_model(req.model.as_deref(), limits)?;
    let f = req.sampling();
    let n = choices_per_prompt(&f)?;
    no_best_of(req.best_of)?;
    if req.suffix.is_some() {
        return Err(ValidationError::Unsupported {
            field: "suffix",
            reason: "braid has no fill-in-the-middle; omit it or send null",
        });
    }
    let logprobs = alternatives("logprobs", req.logprobs)?;
    let echo = req.echo.unwrap_or(false);
    let decoding = Decoding::of(&f, logprobs, None, model, limits)?;
    let raw = req
        .prompt
        .as_ref()
        .ok_or(ValidationError::Missing { field: "prompt" })?;
    let prompts = prompts(raw, model, limits)?;
    if prompts.len() * n > MAX_CHOICES {
        return Err(ValidationError::TooManyChoices {
            prompts: prompts.len(),
            n,
        });
    }
    let mut checked = Vec::with_capacity(prompts.len());
    let mut max_new = 0;
    for (prompt, text) in prompts {
        prompt_length("prompt", prompt.len(), limits)?;
        // With `echo`, 0 answers with the prompt alone (and its logprobs): how a prompt is scored.
        max_new = match req.max_tokens {
            Some(0) if echo => max_tokens("max_tokens", None, Some(0), prompt.len(), limits)?,
            requested => max_tokens("max_tokens", requested, Some(16), prompt.len(), limits)?,
        };
        let text = echo.then(|| text.unwrap_or_else(|| model.tokenizer.decode(&prompt, false)));
        checked.push((prompt, text));
    }
    let mut checked = checked.into_iter();
    let (prompt, echo) = checked.next().expect("prompts() returns at least one");
    let echo_scores = logprobs.filter(|_| echo.is_some());
    let mut valid = decoding.request(prompt, max_new, echo, n);
    valid.score_prompt = valid.score_prompt.max(echo_scores);
    valid.more_prompts = checked.collect();
    Ok(valid)
}

pub fn chat(
    req: &ChatCompletionRequest,
    model: &LoadedModel,
    limits: &Limits,
) -> Result<ValidatedRequest> {
    check_model(req.model.as_deref(), limits)?;
    // Before the fields: no request can chat with this model, however it is written.
    chat_template(model)?;
    let f = req.sampling();
    let n = choices_per_prompt(&f)?;
    let top = alternatives("top_logprobs", req.top_logprobs)?.unwrap_or(0);
    let logprobs = req.logprobs.unwrap_or(false).then_some(top);
    if logprobs.is_none() && top > 0 {
        return Err(ValidationError::Unsupported {
            field: "top_logprobs",
            reason: "without `logprobs: true`",
        });
    }
    let tools = tool_calling(req)?;
    let decoding = Decoding::of(&f, logprobs, tools.as_ref(), model, limits)?;
    let messages = req
        .messages
        .as_ref()
        .ok_or(ValidationError::Missing { field: "messages" })?;
    let rendered = tools.as_ref().map(|t| t.rendered.as_slice());
    let prompt = chat_prompt(messages, rendered, true, model)?;
    prompt_length("messages", prompt.len(), limits)?;
    let (field, requested) = match req.max_completion_tokens {
        Some(n) => ("max_completion_tokens", Some(n)),
        None => ("max_tokens", req.max_tokens),
    };
    let max_tokens = max_tokens(field, requested, None, prompt.len(), limits)?;
    let mut valid = decoding.request(prompt, max_tokens, None, n);
    valid.tools = tools.map(|t| t.reading);
    Ok(valid)
}

/// How many alternatives to report with each token: 0 to 20, as OpenAI allows.
fn alternatives(field: &'static str, requested: Option<i64>) -> Result<Option<usize>> {
    match requested {
        None => Ok(None),
        Some(n) if (0..=20).contains(&n) => Ok(Some(n as usize)),
        Some(n) => Err(out_of_range(field, ">= 0 and <= 20", n)),
    }
}

/// What both endpoints check the same way, from the fields they share.
struct Decoding {
    params: SamplingParams,
    stop_strings: Vec<String>,
    stop_token_ids: Vec<u32>,
    stream: bool,
    include_usage: bool,
    logprobs: Option<usize>,
    prompt_logprobs: Option<usize>,
    constraint: Option<TokenConstraint>,
}

impl Decoding {
    fn of(
        f: &SamplingFields,
        logprobs: Option<usize>,
        tools: Option<&ToolCalling>,
        model: &LoadedModel,
        limits: &Limits,
    ) -> Result<Self> {
        let prompt_logprobs = alternatives("prompt_logprobs", f.prompt_logprobs)?;
        if prompt_logprobs.is_some() && f.stream == Some(true) {
            return Err(ValidationError::Unsupported {
                field: "prompt_logprobs",
                reason: "with `stream`; send `stream: false`, or `echo` with `logprobs` on /v1/completions, whose first chunk carries the prompt's",
            });
        }
        Ok(Self {
            prompt_logprobs,
            params: sampling(f, logprobs, limits)?,
            stop_strings: stop_strings(f, limits)?,
            stop_token_ids: stop_token_ids(f, model, limits)?,
            stream: f.stream.unwrap_or(false),
            include_usage: include_usage(f),
            logprobs,
            constraint: constraint(f, tools, model)?,
        })
    }

    fn request(
        self,
        prompt: Vec<u32>,
        max_tokens: usize,
        echo: Option<String>,
        n: usize,
    ) -> ValidatedRequest {
        ValidatedRequest {
            prompt,
            max_tokens,
            params: self.params,
            stop_strings: self.stop_strings,
            stop_token_ids: self.stop_token_ids,
            stream: self.stream,
            include_usage: self.include_usage,
            echo,
            logprobs: self.logprobs,
            score_prompt: self.prompt_logprobs,
            prompt_logprobs: self.prompt_logprobs,
            more_prompts: Vec::new(),
            n,
            constraint: self.constraint,
            tools: None,
        }
    }
}

/// The request's structured output or required tool call, if it asks for one, compiled
/// against the model's vocabulary: a grammar that cannot be compiled within llguidance's
/// limits is refused here, before anything is queued.
fn constraint(
    f: &SamplingFields,
    tools: Option<&ToolCalling>,
    model: &LoadedModel,
) -> Result<Option<TokenConstraint>> {
    let mut given: Vec<(&'static str, Constraint)> = Vec::new();
    match &f.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => given.push(("response_format", Constraint::JsonObject)),
        Some(ResponseFormat::JsonSchema { json_schema }) => given.push((
            "response_format",
            Constraint::JsonSchema(json_schema.schema.clone().unwrap_or(Value::Bool(true))),
        )),
    }
    if let Some(schema) = &f.guided_json {
        given.push((
            "guided_json",
            Constraint::JsonSchema(schema_value("guided_json", schema)?),
        ));
    }
    if let Some(rx) = &f.guided_regex {
        given.push(("guided_regex", Constraint::Regex(rx.clone())));
    }
    if let Some(choices) = &f.guided_choice {
        given.push(("guided_choice", Constraint::Choice(choices.clone())));
    }
    if let Some(grammar) = &f.guided_grammar {
        given.push(("guided_grammar", Constraint::grammar(grammar)));
    }
    if let Some(so) = &f.structured_outputs {
        const FIELD: &str = "structured_outputs";
        let mut inner = Vec::new();
        if let Some(schema) = &so.json {
            inner.push(Constraint::JsonSchema(schema_value(FIELD, schema)?));
        }
        if let Some(rx) = &so.regex {
            inner.push(Constraint::Regex(rx.clone()));
        }
        if let Some(choices) = &so.choice {
            inner.push(Constraint::Choice(choices.clone()));
        }
        if let Some(grammar) = &so.grammar {
            inner.push(Constraint::grammar(grammar));
        }
        if inner.len() != 1 {
            return Err(ValidationError::WrongShape {
                field: FIELD,
                expected: "an object with exactly one of `json`, `regex`, `choice` and `grammar`",
            });
        }
        given.extend(inner.into_iter().map(|c| (FIELD, c)));
    }
    // An answer either follows a format or may call tools: one grammar cannot leave room
    // for both.
    if let Some(tools) = tools {
        if let Some((first, _)) = given.first() {
            return Err(ValidationError::TwoConstraints {
                first,
                second: "tools",
            });
        }
        if let Some(call) = &tools.enforced {
            given.push(("tools", call.clone()));
        }
    }
    let (field, wanted) = match given.len() {
        0 => return Ok(None),
        1 => given.pop().expect("one"),
        _ => {
            return Err(ValidationError::TwoConstraints {
                first: given[0].0,
                second: given[1].0,
            })
        }
    };
    if f.ignore_eos == Some(true) {
        return Err(ValidationError::Unsupported {
            field: "ignore_eos",
            reason: "with a structured output, which ends where its grammar is complete",
        });
    }
    let grammars = model
        .grammars
        .as_ref()
        .map_err(|problem| ValidationError::Grammar {
            field,
            problem: problem.clone(),
        })?;
    grammars
        .compile(&wanted)
        .map(Some)
        .map_err(|problem| ValidationError::Grammar { field, problem })
}

/// A JSON Schema given as an object, or as a string holding one (vLLM accepts both).
fn schema_value(field: &'static str, given: &Value) -> Result<Value> {
    match given {
        Value::String(s) => serde_json::from_str(s).map_err(|e| ValidationError::Grammar {
            field,
            problem: format!("the schema string is not JSON: {e}"),
        }),
        other => Ok(other.clone()),
    }
}

/// Renders `messages`, with `tools` (OpenAI's function objects) where the model may call
/// them, with the model's chat template, and tokenizes the result. A template that does not
/// render tools gets the conversation in the Hermes syntax as plain turns.
pub fn chat_prompt(
    messages: &[ChatMessageIn],
    tools: Option<&[Value]>,
    add_generation_prompt: bool,
    model: &LoadedModel,
) -> Result<Vec<u32>> {
    if messages.is_empty() {
        return Err(ValidationError::Empty { field: "messages" });
    }
    let msgs = messages
        .iter()
        .enumerate()
        .map(|(i, m)| chat_message(i, m))
        .collect::<Result<Vec<_>>>()?;
    answered_calls_exist(&msgs)?;
    let template = chat_template(model)?;
    let rendered = if template.knows_tools() {
        template.render(&msgs, tools, add_generation_prompt)
    } else {
        template.render(
            &hermes::describe_tools(msgs, tools),
            None,
            add_generation_prompt,
        )
    };
    let text = rendered.map_err(|e| ValidationError::Template(e.to_string()))?;
    let mut tokens = encode(model, &text)?;
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

fn chat_template(model: &LoadedModel) -> Result<&ChatTemplate> {
    model
        .chat_template
        .as_ref()
        .ok_or(ValidationError::NoChatTemplate)
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
    Ok(ChatMessage {
        role,
        content,
        tool_calls,
        tool_call_id,
    })
}

/// An assistant's call as templates read it: its arguments as an object.
fn tool_call(c: &crate::openai_types::ToolCallIn) -> std::result::Result<Value, String> {
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

/// A prompt's ids as the model reads them from its start: with BOS when the model asks for it.
fn encode(model: &LoadedModel, text: &str) -> Result<Vec<u32>> {
    model
        .tokenizer
        .encode_prompt(text)
        .map_err(|e| ValidationError::Tokenize(e.to_string()))
}

/// The prompts of `prompt`: one string or id list, or an array of them (as
/// lm-evaluation-harness batches), each with its text when it was given as text.
fn prompts(
    raw: &Value,
    model: &LoadedModel,
    limits: &Limits,
) -> Result<Vec<(Vec<u32>, Option<String>)>> {
    match raw {
        Value::Array(items)
            if items.len() > 1 && items.iter().all(|v| v.is_string() || v.is_array()) =>
        {
            if items.len() > MAX_CHOICES {
                return Err(ValidationError::TooManyChoices {
                    prompts: items.len(),
                    n: 1,
                });
            }
            items.iter().map(|p| prompt(p, model, limits)).collect()
        }
        _ => Ok(vec![prompt(raw, model, limits)?]),
    }
}

/// One prompt's tokens, and its text when it was given as text.
fn prompt(raw: &Value, model: &LoadedModel, limits: &Limits) -> Result<(Vec<u32>, Option<String>)> {
    const SHAPE: &str =
        "a string, an array of token ids, or an array of strings or of token-id arrays";
    let wrong = ValidationError::WrongShape {
        field: "prompt",
        expected: SHAPE,
    };
    match raw {
        Value::String(s) => {
            let tokens = encode(model, s)?;
            if tokens.is_empty() {
                return Err(ValidationError::Empty { field: "prompt" });
            }
            Ok((tokens, Some(s.clone())))
        }
        Value::Array(items) if items.is_empty() => Err(ValidationError::Empty { field: "prompt" }),
        Value::Array(items) if items.iter().all(Value::is_number) => {
            Ok((token_ids("prompt", items, limits)?, None))
        }
        Value::Array(items)
            if items.len() == 1 && (items[0].is_string() || items[0].is_array()) =>
        {
            prompt(&items[0], model, limits)
        }
        _ => Err(wrong),
    }
}

fn token_ids(field: &'static str, items: &[Value], limits: &Limits) -> Result<Vec<u32>> {
    let ids = items
        .iter()
        .map(|v| {
            v.as_i64().ok_or(ValidationError::WrongShape {
                field,
                expected: "an array of integer token ids",
            })
        })
        .collect::<Result<Vec<i64>>>()?;
    known_token_ids(field, &ids, limits)
}

/// `n`: 1 to [`MAX_N`].
fn choices_per_prompt(f: &SamplingFields) -> Result<usize> {
    match f.n {
        None => Ok(1),
        Some(n) if (1..=MAX_N as i64).contains(&n) => Ok(n as usize),
        Some(n) => Err(out_of_range("n", &format!(">= 1 and <= {MAX_N}"), n)),
    }
}

/// `best_of`: braid samples no hidden candidates to pick the best from; ask for `n` choices.
fn no_best_of(v: Option<i64>) -> Result<()> {
    match v {
        None | Some(1) => Ok(()),
        Some(n) => Err(out_of_range(
            "best_of",
            "1 (braid has no best-of sampling; `n` returns several choices)",
            n,
        )),
    }
}

fn include_usage(f: &SamplingFields) -> bool {
    f.stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
}

fn out_of_range(field: &'static str, bound: &str, got: impl ToString) -> ValidationError {
    ValidationError::OutOfRange {
        field,
        bound: bound.to_string(),
        got: got.to_string(),
    }
}

/// `v` (default `default`) must be finite and within the bounds; `bound` describes them.
/// The bounds are checked again on the f32 the sampler gets: 1e-300 is > 0 as f64 but 0 as
/// f32 (a division by zero in the repetition penalty).
fn float(
    field: &'static str,
    v: Option<f64>,
    default: f64,
    ok: impl Fn(f64) -> bool,
    bound: &str,
) -> Result<f32> {
    let Some(x) = v else {
        return Ok(default as f32);
    };
    if !x.is_finite() {
        return Err(ValidationError::NotFinite { field, got: x });
    }
    let y = x as f32;
    if !ok(x) || !y.is_finite() || !ok(y as f64) {
        return Err(out_of_range(field, bound, x));
    }
    Ok(y)
}

fn sampling(
    f: &SamplingFields,
    logprobs: Option<usize>,
    limits: &Limits,
) -> Result<SamplingParams> {
    let temperature = float(
        "temperature",
        f.temperature,
        1.0,
        |x| (0.0..=2.0).contains(&x),
        ">= 0 and <= 2",
    )?;
    let top_p = float(
        "top_p",
        f.top_p,
        1.0,
        |x| x > 0.0 && x <= 1.0,
        "> 0 and <= 1",
    )?;
    let min_p = float(
        "min_p",
        f.min_p,
        0.0,
        |x| (0.0..=1.0).contains(&x),
        ">= 0 and <= 1",
    )?;
    let penalty = |x: f64| (-2.0..=2.0).contains(&x);
    let presence_penalty = float(
        "presence_penalty",
        f.presence_penalty,
        0.0,
        penalty,
        ">= -2 and <= 2",
    )?;
    let frequency_penalty = float(
        "frequency_penalty",
        f.frequency_penalty,
        0.0,
        penalty,
        ">= -2 and <= 2",
    )?;
    let repetition_penalty = float(
        "repetition_penalty",
        f.repetition_penalty,
        1.0,
        |x| x > 0.0 && x <= 2.0,
        "> 0 and <= 2",
    )?;
    let top_k = match f.top_k {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as usize,
        Some(k) => return Err(out_of_range("top_k", ">= 0 (0 or -1 turn it off)", k)),
    };
    Ok(SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        repetition_penalty,
        presence_penalty,
        frequency_penalty,
        seed: f.seed.map(|s| s as u64),
        logprobs,
        logit_bias: logit_bias(f, limits)?,
    })
}

/// OpenAI's `logit_bias`: keys are token ids written as strings, values from -100 to 100.
fn logit_bias(f: &SamplingFields, limits: &Limits) -> Result<Vec<(u32, f32)>> {
    let Some(map) = &f.logit_bias else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(map.len());
    for (key, &bias) in map {
        let id: i64 = key.trim().parse().map_err(|_| ValidationError::WrongShape {
            field: "logit_bias",
            expected: "an object whose keys are token ids (\"15339\") and whose values are numbers from -100 to 100",
        })?;
        if id < 0 || id as u64 >= limits.vocab_size as u64 {
            return Err(ValidationError::TokenOutOfVocab {
                field: "logit_bias",
                id,
                vocab: limits.vocab_size,
            });
        }
        if !bias.is_finite() || !(-100.0..=100.0).contains(&bias) {
            return Err(out_of_range("logit_bias", ">= -100 and <= 100", bias));
        }
        out.push((id as u32, bias as f32));
    }
    Ok(out)
}

fn stop_strings(f: &SamplingFields, limits: &Limits) -> Result<Vec<String>> {
    let stops: Vec<String> = match &f.stop {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Some(_) => {
            return Err(ValidationError::WrongShape {
                field: "stop",
                expected: "a string or an array of strings",
            })
        }
    };
    if stops.len() > limits.max_stop_strings {
        return Err(ValidationError::TooManyStops {
            count: stops.len(),
            max: limits.max_stop_strings,
        });
    }
    for (index, s) in stops.iter().enumerate() {
        if s.is_empty() {
            return Err(ValidationError::Empty { field: "stop" });
        }
        if s.len() > limits.max_stop_string_len {
            return Err(ValidationError::StopTooLong {
                index,
                len: s.len(),
                max: limits.max_stop_string_len,
            });
        }
    }
    Ok(stops)
}

fn stop_token_ids(f: &SamplingFields, model: &LoadedModel, limits: &Limits) -> Result<Vec<u32>> {
    let mut ids: Vec<u32> = if f.ignore_eos.unwrap_or(false) {
        vec![]
    } else {
        model.tokenizer.eos_token_ids().to_vec()
    };
    for id in known_token_ids(
        "stop_token_ids",
        f.stop_token_ids.as_deref().unwrap_or(&[]),
        limits,
    )? {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// `ids` as token ids, each inside the vocabulary.
pub fn known_token_ids(field: &'static str, ids: &[i64], limits: &Limits) -> Result<Vec<u32>> {
    ids.iter()
        .map(|&id| match id {
            id if id >= 0 && (id as u64) < limits.vocab_size as u64 => Ok(id as u32),
            id => Err(ValidationError::TokenOutOfVocab {
                field,
                id,
                vocab: limits.vocab_size,
            }),
        })
        .collect()
}

/// The prompt must be no longer than `--max-prompt-tokens` (one that does not even fit the
/// context is reported as such, by `max_tokens`).
fn prompt_length(field: &'static str, prompt: usize, limits: &Limits) -> Result<()> {
    if prompt > limits.max_prompt_tokens && prompt < limits.context_length {
        return Err(ValidationError::PromptTooLong {
            field,
            prompt,
            max: limits.max_prompt_tokens,
        });
    }
    Ok(())
}

/// The request's `max_tokens` (or `default`; without one, all the context the prompt leaves,
/// up to the cap), checked against the cap and the context.
fn max_tokens(
    field: &'static str,
    requested: Option<i64>,
    default: Option<usize>,
    prompt: usize,
    limits: &Limits,
) -> Result<usize> {
    let context = limits.context_length;
    if prompt >= context {
        return Err(ValidationError::PromptFillsContext { prompt, context });
    }
    let max_tokens = match requested {
        Some(n) if n < 1 => return Err(out_of_range(field, ">= 1", n)),
        Some(n) if n as u64 > limits.max_tokens_cap as u64 => {
            return Err(out_of_range(
                field,
                &format!(
                    "<= {} (the server's --max-tokens-cap)",
                    limits.max_tokens_cap
                ),
                n,
            ))
        }
        Some(n) => n as usize,
        None => match default {
            Some(d) => d.min(limits.max_tokens_cap),
            None => (context - prompt).min(limits.max_tokens_cap),
        },
    };
    if prompt + max_tokens > context {
        return Err(ValidationError::ContextOverflow {
            field,
            prompt,
            max_tokens,
            context,
        });
    }
    Ok(max_tokens)
}

#[cfg(test)]
#[path = "validation_tests.rs"]
mod tests;
