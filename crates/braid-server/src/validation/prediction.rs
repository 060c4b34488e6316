//! OpenAI's `prediction`: the text an answer is expected to repeat, as tokens to draft.
//!
//! A prediction only ever makes an answer faster, never different (the engine verifies every
//! drafted token against the model), so any text is accepted; what is refused is a shape
//! OpenAI would refuse, and a prediction longer than the context, which no answer could use.

use super::{encode, Limits, Result};
use crate::error::ValidationError;
use crate::openai_types::Prediction;
use braid_model::LoadedModel;
use serde_json::Value;

const SHAPE: &str = "{\"type\": \"content\", \"content\": a string or an array of {\"type\": \"text\", \"text\": ...} parts}";

/// The prediction's tokens (none for an empty one).
pub(super) fn prediction(
    p: Option<&Prediction>,
    model: &LoadedModel,
    limits: &Limits,
) -> Result<Option<Vec<u32>>> {
    let Some(p) = p else {
        return Ok(None);
    };
    let wrong = |field| ValidationError::WrongShape {
        field,
        expected: SHAPE,
    };
    if p.kind != "content" {
        return Err(wrong("prediction.type"));
    }
    let text = match &p.content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut text = String::new();
            for part in parts {
                match (
                    part.get("type").and_then(Value::as_str),
                    part.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => return Err(wrong("prediction.content")),
                }
            }
            text
        }
        _ => return Err(wrong("prediction.content")),
    };
    let tokens = encode(model, &text, false)?;
    if tokens.len() > limits.context_length {
        return Err(ValidationError::TooMany {
            field: "prediction.content",
            count: tokens.len(),
            what: "tokens",
            max: limits.context_length,
        });
    }
    Ok((!tokens.is_empty()).then_some(tokens))
}
