//! Raw request → `ValidatedRequest`, in one place (Hugging Face TGI's pattern).
//!
//! Every way a request can be wrong is a variant of `ValidationError` (in `error.rs`, beside
//! its HTTP status); each message names the field and the bound. The engine only ever sees
//! validated values: a finite temperature in range, token ids inside the vocabulary, a
//! prompt plus `max_tokens` that fits the context.
//!
//! This file puts a request together and checks its length against the context; each
//! concern it draws on is a file of `validation/`: the prompt's tokens (`prompt.rs`), a
//! conversation rendered with the chat template (`messages.rs`), sampling and stopping
//! (`sampling.rs`, against the bounds of `field_bounds.rs`), and structured outputs
//! (`constraint.rs`).

mod constraint;
mod embedding;
mod limits;
mod messages;
mod prediction;
mod prompt;
mod sampling;

pub use embedding::{
    check_embedding_model, embedding, Embeds, Encoding, PooledModel, ValidEmbedding,
    MAX_EMBEDDING_INPUTS,
};
pub use limits::{Limits, MAX_LOGIT_BIAS_ENTRIES, MAX_STOP_TOKEN_IDS};
pub use messages::{chat_prompt, template_variables, ChatEnd};
pub use prompt::{encode, known_token_ids};

use crate::args::ReasoningParser;
use crate::error::ValidationError;
use crate::field_bounds::{LOGPROBS, MAX_CHOICES, PROMPT_LOGPROBS, TOP_LOGPROBS};
use crate::openai_types::{
    ChatCompletionRequest, CompletionRequest, ResponseFormat, SamplingFields,
};
use crate::tools::{tool_calling, CallReading, ToolCalling};
use braid_model::{LoadedModel, SamplingParams};
use braid_text::reasoning::ReasoningSyntax;
use braid_text::tool_calls::Besides;
use braid_text::{Constraint, TokenConstraint};
use constraint::constraint;
use messages::chat_template;
use prediction::prediction;
use prompt::prompts;
use sampling::{
    alternatives, choices_per_prompt, include_usage, no_best_of, sampling, stop_strings,
    stop_token_ids,
};

/// What the handlers and the engine work from.
#[derive(Clone, Debug)]
pub struct ValidatedRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub params: SamplingParams,
    pub stop_strings: Vec<String>,
    /// A matched stop string stays at the end of the text.
    pub keep_stop_string: bool,
    /// Special tokens the model writes are left out of the text.
    pub skip_special_tokens: bool,
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
    /// Chat with a model that reasons: where its reasoning is, and whether the prompt left
    /// it open (the answer starts inside it).
    pub reasoning: Option<(ReasoningSyntax, bool)>,
    /// The `prediction`'s tokens.
    pub prediction: Option<Vec<u32>>,
}

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

type Result<T> = std::result::Result<T, ValidationError>;

/// A request naming another model is refused; omitting `model` is fine. Naming the embedding
/// model for generation is a 400 that says which model generates.
pub fn check_model(requested: Option<&str>, limits: &Limits) -> Result<()> {
    match requested {
        Some(m) if limits.embedding_model_name.as_deref() == Some(m) => {
            Err(ValidationError::WrongModelKind {
                requested: m.to_string(),
                cannot: "is an embedding model and does not generate text",
                serving: format!("`{}`", limits.served_model_name),
            })
        }
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
    let logprobs = alternatives(&LOGPROBS, req.logprobs)?;
    let echo = req.echo.unwrap_or(false);
    let decoding = Decoding::of(&f, logprobs, None, model, limits)?;
    let raw = req
        .prompt
        .as_ref()
        .ok_or(ValidationError::Missing { field: "prompt" })?;
    let bos = req.add_special_tokens.unwrap_or(true);
    let prompts = prompts(raw, bos, model, limits)?;
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
    let prompt_tokens: usize = checked.iter().map(|(p, _)| p.len()).sum();
    within_budget(
        "prompt",
        prompt_tokens,
        max_new,
        checked.len() * n,
        n,
        limits,
    )?;
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
    let top = alternatives(&TOP_LOGPROBS, req.top_logprobs)?.unwrap_or(0);
    let logprobs = req.logprobs.unwrap_or(false).then_some(top);
    if logprobs.is_none() && top > 0 {
        return Err(ValidationError::Unsupported {
            field: "top_logprobs",
            reason: "without `logprobs: true`",
        });
    }
    let tools = tool_calling(req, limits.tool_syntax)?;
    let mut decoding = Decoding::of(&f, logprobs, tools.as_ref(), model, limits)?;
    // Calls written with special tokens (Mistral's `[TOOL_CALLS]`) are read from the text.
    if tools.is_some() && limits.tool_syntax.needs_marks() && f.skip_special_tokens.is_none() {
        decoding.skip_special_tokens = false;
    }
    let messages = req
        .messages
        .as_ref()
        .ok_or(ValidationError::Missing { field: "messages" })?;
    let rendered = tools.as_ref().map(|t| t.rendered.as_slice());
    let end = ChatEnd::of(req.add_generation_prompt, req.continue_final_message)?;
    let variables = messages::template_variables(
        req.chat_template_kwargs.as_ref(),
        req.reasoning_effort.as_deref(),
        model,
    )?;
    let prompt = chat_prompt(
        messages,
        rendered,
        end,
        model,
        limits.special_in_messages,
        &variables,
    )?;
    prompt_length("messages", prompt.len(), limits)?;
    let (field, requested) = match req.max_completion_tokens {
        Some(n) => ("max_completion_tokens", Some(n)),
        None => ("max_tokens", req.max_tokens),
    };
    let max_tokens = max_tokens(field, requested, None, prompt.len(), limits)?;
    within_budget("messages", prompt.len(), max_tokens, n, n, limits)?;
    let free_text = tools.as_ref().is_some_and(|t| {
        matches!(
            t.enforced,
            Some(Constraint::ToolCalls {
                besides: Besides::Text,
                ..
            })
        )
    }) && matches!(f.response_format, None | Some(ResponseFormat::Text));
    let mut valid = decoding.request(prompt, max_tokens, None, n);
    valid.tools = tools.map(|t| t.reading);
    valid.reasoning = reasoning(&valid, free_text, model, limits);
    Ok(valid)
}

/// Where a chat answer's reasoning is (`--reasoning-parser`, by default the template's), and
/// whether the prompt left it open. An answer held to a grammar (a structured output, a
/// forced call) is all reply: the grammar leaves the model no room to reason first; the
/// `auto` tools grammar (`free_text`) leaves text free, reasoning too.
fn reasoning(
    valid: &ValidatedRequest,
    free_text: bool,
    model: &LoadedModel,
    limits: &Limits,
) -> Option<(ReasoningSyntax, bool)> {
    let syntax = match limits.reasoning_parser {
        ReasoningParser::None => return None,
        ReasoningParser::Think => braid_text::reasoning::THINK,
        ReasoningParser::Auto => {
            ReasoningSyntax::of_template(model.chat_template.as_ref()?.source())?
        }
    };
    // The prompt's last few tokens hold any tag the template ended it with.
    let tail = &valid.prompt[valid.prompt.len().saturating_sub(16)..];
    let inside = (valid.constraint.is_none() || free_text)
        && syntax.prompt_opens_reasoning(&model.tokenizer.decode(tail, false));
    Some((syntax, inside))
}

/// What both endpoints check the same way, from the fields they share.
struct Decoding {
    params: SamplingParams,
    stop_strings: Vec<String>,
    keep_stop_string: bool,
    skip_special_tokens: bool,
    stop_token_ids: Vec<u32>,
    stream: bool,
    include_usage: bool,
    logprobs: Option<usize>,
    prompt_logprobs: Option<usize>,
    constraint: Option<TokenConstraint>,
    prediction: Option<Vec<u32>>,
}

impl Decoding {
    fn of(
        f: &SamplingFields,
        logprobs: Option<usize>,
        tools: Option<&ToolCalling>,
        model: &LoadedModel,
        limits: &Limits,
    ) -> Result<Self> {
        let prompt_logprobs = alternatives(&PROMPT_LOGPROBS, f.prompt_logprobs)?;
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
            // vLLM's name and SGLang's for the same choice: either asks for it.
            keep_stop_string: f.include_stop_str_in_output == Some(true)
                || f.no_stop_trim == Some(true),
            skip_special_tokens: f.skip_special_tokens.unwrap_or(true),
            stop_token_ids: stop_token_ids(f, model, limits)?,
            stream: f.stream.unwrap_or(false),
            include_usage: include_usage(f),
            logprobs,
            constraint: constraint(f, tools, model)?,
            prediction: prediction(f.prediction.as_ref(), model, limits)?,
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
            keep_stop_string: self.keep_stop_string,
            skip_special_tokens: self.skip_special_tokens,
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
            reasoning: None,
            prediction: self.prediction,
        }
    }
}

/// A request's whole cost must be within `--max-request-tokens`: `prompt_tokens` (all its
/// prompts, each read once and shared by its `n` choices) plus `max_tokens` for each of its
/// `choices`. Each prompt is within the context, but 64 of them, each with 16 choices, are
/// minutes of engine time from one body of under a megabyte.
fn within_budget(
    field: &'static str,
    prompt_tokens: usize,
    max_tokens: usize,
    choices: usize,
    n: usize,
    limits: &Limits,
) -> Result<()> {
    let total = prompt_tokens * n + max_tokens * choices;
    if total > limits.max_request_tokens {
        return Err(ValidationError::RequestTooLarge {
            field,
            total,
            prompt_tokens: prompt_tokens * n,
            max_tokens,
            choices,
            budget: limits.max_request_tokens,
        });
    }
    Ok(())
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
        Some(n) if n < 1 => return Err(ValidationError::out_of_range(field, ">= 1", n)),
        Some(n) if n as u64 > limits.max_tokens_cap as u64 => {
            return Err(ValidationError::out_of_range(
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
