//! An embedding request checked against the embedding model: which model, which inputs, cut
//! where, and in which encoding the vectors go back.
//!
//! Texts are tokenized here, off the async workers like every prompt, and cut as
//! sentence-transformers cuts them (the first `max_seq_length` tokens) unless the request asks
//! for vLLM's `truncate_prompt_tokens` (the last k). Token-id inputs are read as given, special
//! tokens included, as vLLM reads them; one longer than the model reads is refused unless
//! `truncate_prompt_tokens` says where to cut it.

use super::{Limits, Result};
use crate::error::ValidationError;
use crate::openai_types::{EmbeddingInput, EmbeddingRequest};
use braid_embedding::{Keep, SentenceEmbedder};

/// Most inputs one request may hold (OpenAI's bound).
pub const MAX_EMBEDDING_INPUTS: usize = 2048;

/// How the vectors go back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Float,
    /// Little-endian f32 bytes, in base64.
    Base64,
}

/// An embedding request ready for the engine.
#[derive(Debug)]
pub struct ValidEmbedding {
    pub texts: Vec<Vec<u32>>,
    pub encoding: Encoding,
}

impl ValidEmbedding {
    pub fn prompt_tokens(&self) -> usize {
        self.texts.iter().map(Vec::len).sum()
    }
}

/// The model a request may name: the embedding model, or nothing.
pub fn check_embedding_model(
    requested: Option<&str>,
    embedder: Option<&SentenceEmbedder>,
    limits: &Limits,
) -> Result<()> {
    let embeds = embedder.map_or("none".to_string(), |e| format!("`{}`", e.id()));
    let does_not_embed = |requested: &str| ValidationError::WrongModelKind {
        requested: requested.to_string(),
        cannot: "generates text and does not embed",
        serving: embeds.clone(),
    };
    match (requested.filter(|m| !m.is_empty()), embedder) {
        (None, Some(_)) => Ok(()),
        (Some(m), Some(e)) if m == e.id() => Ok(()),
        (None, None) => Err(does_not_embed(&limits.served_model_name)),
        (Some(m), _) if m == limits.served_model_name => Err(does_not_embed(m)),
        (Some(m), _) => Err(ValidationError::ModelNotFound {
            requested: m.to_string(),
            served: match embedder {
                Some(e) => format!("{}` and `{}", limits.served_model_name, e.id()),
                None => limits.served_model_name.clone(),
            },
        }),
    }
}

pub fn embedding(
    req: &EmbeddingRequest,
    embedder: &SentenceEmbedder,
    limits: &Limits,
) -> Result<ValidEmbedding> {
    let encoding = match req.encoding_format.as_deref() {
        None | Some("float") => Encoding::Float,
        Some("base64") => Encoding::Base64,
        Some(other) => {
            return Err(ValidationError::OutOfRange {
                field: "encoding_format",
                bound: "\"float\" or \"base64\"".into(),
                got: format!("{other:?}"),
            })
        }
    };
    if let Some(d) = req.dimensions {
        if d != embedder.dimensions() {
            return Err(ValidationError::OutOfRange {
                field: "dimensions",
                bound: format!(
                    "{}, the model's own length: `{}` was not trained to make shorter vectors",
                    embedder.dimensions(),
                    embedder.id()
                ),
                got: d.to_string(),
            });
        }
    }
    let max = embedder.max_tokens();
    let cut = match req.truncate_prompt_tokens {
        None => None,
        Some(-1) => Some(max),
        Some(k) if k >= 1 && k as usize <= max => Some(k as usize),
        Some(k) => {
            return Err(ValidationError::OutOfRange {
                field: "truncate_prompt_tokens",
                bound: format!(
                    "-1 (the model's longest) or 1 to {max}, the tokens the model reads"
                ),
                got: k.to_string(),
            })
        }
    };
    let count = match &req.input {
        EmbeddingInput::Text(_) => 1,
        EmbeddingInput::Texts(v) => v.len(),
        EmbeddingInput::Tokens(_) => 1,
        EmbeddingInput::TokenLists(v) => v.len(),
    };
    if count == 0 {
        return Err(ValidationError::Empty { field: "input" });
    }
    if count > MAX_EMBEDDING_INPUTS {
        return Err(ValidationError::TooMany {
            field: "input",
            what: "inputs",
            count,
            max: MAX_EMBEDDING_INPUTS,
        });
    }
    let text = |t: &str| -> Result<Vec<u32>> {
        if t.is_empty() {
            return Err(ValidationError::Empty { field: "input" });
        }
        let keep = cut.map_or(Keep::First(max), Keep::Last);
        embedder
            .tokenize(t, keep)
            .map_err(|e| ValidationError::Tokenize(e.to_string()))
    };
    let vocab = embedder.vocab_size();
    let ids = |ids: &[i64]| -> Result<Vec<u32>> {
        if ids.is_empty() {
            return Err(ValidationError::Empty { field: "input" });
        }
        if let Some(&id) = ids.iter().find(|&&id| id < 0 || id as usize >= vocab) {
            return Err(ValidationError::TokenOutOfVocab {
                field: "input",
                id,
                vocab,
            });
        }
        let keep = match cut {
            Some(k) => &ids[ids.len().saturating_sub(k)..],
            None if ids.len() > max => {
                return Err(ValidationError::OutOfRange {
                    field: "input",
                    bound: format!(
                        "at most {max} token ids a text, the most `{}` reads (or set truncate_prompt_tokens)",
                        embedder.id()
                    ),
                    got: format!("{} ids", ids.len()),
                })
            }
            None => ids,
        };
        Ok(keep.iter().map(|&id| id as u32).collect())
    };
    let texts = match &req.input {
        EmbeddingInput::Text(t) => vec![text(t)?],
        EmbeddingInput::Texts(v) => v.iter().map(|t| text(t)).collect::<Result<_>>()?,
        EmbeddingInput::Tokens(v) => vec![ids(v)?],
        EmbeddingInput::TokenLists(v) => v.iter().map(|t| ids(t)).collect::<Result<_>>()?,
    };
    let valid = ValidEmbedding { texts, encoding };
    let total = valid.prompt_tokens();
    if total > limits.max_request_tokens {
        return Err(ValidationError::TooMany {
            field: "input",
            what: "tokens in all",
            count: total,
            max: limits.max_request_tokens,
        });
    }
    Ok(valid)
}
