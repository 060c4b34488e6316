//! A completion's prompt as token ids: text tokenized the way the model reads it, or ids
//! given directly, each checked against the vocabulary.

use super::limits::Limits;
use crate::error::ValidationError;
use crate::field_bounds::MAX_CHOICES;
use braid_model::LoadedModel;
use serde_json::Value;

type Result<T> = std::result::Result<T, ValidationError>;

/// A prompt's ids as the model reads them from its start: with BOS when the model asks for it.
/// A text prompt's tokens, with BOS in front where the model's tokenizer asks for it and
/// `bos` (the request's `add_special_tokens`) allows it.
pub fn encode(model: &LoadedModel, text: &str, bos: bool) -> Result<Vec<u32>> {
    if bos {
        model.tokenizer.encode_prompt(text)
    } else {
        model.tokenizer.encode(text)
    }
    .map_err(|e| ValidationError::Tokenize(e.to_string()))
}

/// The prompts of `prompt`: one string or id list, or an array of them (as
/// lm-evaluation-harness batches), each with its text when it was given as text.
pub(super) fn prompts(
    raw: &Value,
    bos: bool,
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
            items
                .iter()
                .map(|p| prompt(p, bos, model, limits))
                .collect()
        }
        _ => Ok(vec![prompt(raw, bos, model, limits)?]),
    }
}

/// One prompt's tokens, and its text when it was given as text.
fn prompt(
    raw: &Value,
    bos: bool,
    model: &LoadedModel,
    limits: &Limits,
) -> Result<(Vec<u32>, Option<String>)> {
    const SHAPE: &str =
        "a string, an array of token ids, or an array of strings or of token-id arrays";
    let wrong = ValidationError::WrongShape {
        field: "prompt",
        expected: SHAPE,
    };
    match raw {
        Value::String(s) => {
            let tokens = encode(model, s, bos)?;
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
            prompt(&items[0], bos, model, limits)
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
