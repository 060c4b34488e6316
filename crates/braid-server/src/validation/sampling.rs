//! The sampling and stopping fields both endpoints share, checked against the bounds of
//! `field_bounds.rs` and turned into what the sampler and the stop matcher get.

use super::limits::{Limits, MAX_LOGIT_BIAS_ENTRIES, MAX_STOP_TOKEN_IDS};
use super::prompt::known_token_ids;
use crate::error::ValidationError;
use crate::field_bounds::{
    NumericField, BEST_OF, FREQUENCY_PENALTY, LOGIT_BIAS, MIN_P, N, PRESENCE_PENALTY,
    REPETITION_PENALTY, TEMPERATURE, TOP_K, TOP_P,
};
use crate::openai_types::SamplingFields;
use braid_model::{LoadedModel, SamplingParams};
use serde_json::Value;

type Result<T> = std::result::Result<T, ValidationError>;

/// How many alternatives to report with each token (`logprobs`, `top_logprobs`,
/// `prompt_logprobs`), as OpenAI allows.
pub(super) fn alternatives(field: &NumericField, requested: Option<i64>) -> Result<Option<usize>> {
    requested
        .map(|n| integer(field, n).map(|n| n as usize))
        .transpose()
}

/// `n`, choices per prompt.
pub(super) fn choices_per_prompt(f: &SamplingFields) -> Result<usize> {
    match f.n {
        None => Ok(N.default.unwrap_or(1.0) as usize),
        Some(n) => integer(&N, n).map(|n| n as usize),
    }
}

/// `best_of`: braid samples no hidden candidates to pick the best from; ask for `n` choices.
pub(super) fn no_best_of(v: Option<i64>) -> Result<()> {
    v.map_or(Ok(()), |n| integer(&BEST_OF, n).map(drop))
}

pub(super) fn include_usage(f: &SamplingFields) -> bool {
    f.stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
}

fn integer(field: &NumericField, v: i64) -> Result<i64> {
    if field.contains(v as f64) {
        Ok(v)
    } else {
        Err(ValidationError::outside(field, v))
    }
}

/// `v` (absent: the field's default) must be finite and within the field's bounds. The
/// bounds are checked again on the f32 the sampler gets: 1e-300 is > 0 as f64 but 0 as f32
/// (a division by zero in the repetition penalty).
fn float(field: &NumericField, v: Option<f64>) -> Result<f32> {
    let Some(x) = v else {
        return Ok(field.default.unwrap_or_default() as f32);
    };
    if !x.is_finite() {
        return Err(ValidationError::NotFinite {
            field: field.name,
            got: x,
        });
    }
    let y = x as f32;
    if !field.contains(x) || !y.is_finite() || !field.contains(y as f64) {
        return Err(ValidationError::outside(field, x));
    }
    Ok(y)
}

pub(super) fn sampling(
    f: &SamplingFields,
    logprobs: Option<usize>,
    limits: &Limits,
) -> Result<SamplingParams> {
    let temperature = float(&TEMPERATURE, f.temperature)?;
    let top_p = float(&TOP_P, f.top_p)?;
    let min_p = float(&MIN_P, f.min_p)?;
    let presence_penalty = float(&PRESENCE_PENALTY, f.presence_penalty)?;
    let frequency_penalty = float(&FREQUENCY_PENALTY, f.frequency_penalty)?;
    let repetition_penalty = float(&REPETITION_PENALTY, f.repetition_penalty)?;
    let top_k = match f.top_k {
        None => 0,
        Some(k) if TOP_K.is_off(k as f64) => 0,
        Some(k) => integer(&TOP_K, k)? as usize,
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

/// A list field may hold at most `max` items.
fn at_most(field: &'static str, what: &'static str, count: usize, max: usize) -> Result<()> {
    if count > max {
        return Err(ValidationError::TooMany {
            field,
            what,
            count,
            max,
        });
    }
    Ok(())
}

/// OpenAI's `logit_bias`: keys are token ids written as strings, values from -100 to 100.
fn logit_bias(f: &SamplingFields, limits: &Limits) -> Result<Vec<(u32, f32)>> {
    let Some(map) = &f.logit_bias else {
        return Ok(Vec::new());
    };
    at_most("logit_bias", "entries", map.len(), MAX_LOGIT_BIAS_ENTRIES)?;
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
        if !bias.is_finite() || !LOGIT_BIAS.contains(bias) {
            return Err(ValidationError::outside(&LOGIT_BIAS, bias));
        }
        out.push((id as u32, bias as f32));
    }
    Ok(out)
}

pub(super) fn stop_strings(f: &SamplingFields, limits: &Limits) -> Result<Vec<String>> {
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
    at_most("stop", "strings", stops.len(), limits.max_stop_strings)?;
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

pub(super) fn stop_token_ids(
    f: &SamplingFields,
    model: &LoadedModel,
    limits: &Limits,
) -> Result<Vec<u32>> {
    let asked = f.stop_token_ids.as_deref().unwrap_or(&[]);
    at_most(
        "stop_token_ids",
        "token ids",
        asked.len(),
        MAX_STOP_TOKEN_IDS,
    )?;
    let mut ids: Vec<u32> = if f.ignore_eos.unwrap_or(false) {
        vec![]
    } else {
        model.tokenizer.eos_token_ids().to_vec()
    };
    let mut seen: std::collections::HashSet<u32> = ids.iter().copied().collect();
    for id in known_token_ids("stop_token_ids", asked, limits)? {
        if seen.insert(id) {
            ids.push(id);
        }
    }
    Ok(ids)
}
