//! Structured outputs: `response_format`, vLLM's `structured_outputs` and `guided_*`
//! fields, and tool calls (forced, or in `auto` held to their schemas once opened, the rest
//! of the answer free or, with a `response_format`, its JSON), as one grammar compiled
//! against the vocabulary.

use crate::error::ValidationError;
use crate::openai_types::{ResponseFormat, SamplingFields};
use crate::tools::ToolCalling;
use braid_model::LoadedModel;
use braid_text::tool_calls::Besides;
use braid_text::{Constraint, TokenConstraint};
use serde_json::Value;

type Result<T> = std::result::Result<T, ValidationError>;

/// The request's structured output or required tool call, if it asks for one, compiled
/// against the model's vocabulary: a grammar that cannot be compiled within llguidance's
/// limits is refused here, before anything is queued.
pub(super) fn constraint(
    f: &SamplingFields,
    tools: Option<&ToolCalling>,
    model: &LoadedModel,
) -> Result<Option<TokenConstraint>> {
    let mut given: Vec<(&'static str, Constraint)> = Vec::new();
    match &f.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => given.push(("response_format", Constraint::JsonObject)),
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            let schema = json_schema.schema.clone().unwrap_or(Value::Bool(true));
            // OpenAI's strict mode reads every object as closed.
            let schema = match json_schema.strict {
                Some(true) => crate::tools::closed(schema),
                _ => schema,
            };
            given.push(("response_format", Constraint::JsonSchema(schema)))
        }
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
    // With tools, a response format is what an answer that is not a call follows (in `auto`;
    // a forced answer is all calls). Other constraints leave no room for calls.
    if let Some(tools) = tools {
        let format = match given.as_slice() {
            [] => None,
            [("response_format", format)] => Some(format.clone()),
            [(first, _), ..] => {
                return Err(ValidationError::TwoConstraints {
                    first,
                    second: "tools",
                })
            }
        };
        given.clear();
        if let Some(format) = &format {
            // Compiled alone first, so that a bad schema is refused under its own name.
            compile(model, "response_format", format)?;
        }
        if let Some(call) = &tools.enforced {
            let call = match (call, format) {
                (
                    Constraint::ToolCalls {
                        functions,
                        parallel,
                        syntax,
                        besides: Besides::Text,
                    },
                    Some(format),
                ) => Constraint::ToolCalls {
                    functions: functions.clone(),
                    parallel: *parallel,
                    syntax: *syntax,
                    besides: Besides::Json(match format {
                        Constraint::JsonSchema(schema) => schema,
                        _ => serde_json::json!({"type": "object"}),
                    }),
                },
                (call, _) => call.clone(),
            };
            given.push(("tools", call));
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
    // Free text around calls never completes the grammar, so it never forces the end.
    let free_text = matches!(
        wanted,
        Constraint::ToolCalls {
            besides: Besides::Text,
            ..
        }
    );
    if f.ignore_eos == Some(true) && !free_text {
        return Err(ValidationError::Unsupported {
            field: "ignore_eos",
            reason: "with a structured output, which ends where its grammar is complete",
        });
    }
    compile(model, field, &wanted).map(Some)
}

fn compile(
    model: &LoadedModel,
    field: &'static str,
    wanted: &Constraint,
) -> Result<TokenConstraint> {
    let grammars = model
        .grammars
        .as_ref()
        .map_err(|problem| ValidationError::Grammar {
            field,
            problem: problem.clone(),
        })?;
    grammars
        .compile(wanted)
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
