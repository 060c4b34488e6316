//! An embedding request checked against the embedding model: which model, which inputs, cut
//! where, and in which encoding the vectors go back.
//!
//! Two kinds of model embed: the sentence model (`--embedding-model`) and the generation model
//! with `--pooling`; the checks are the same for both ([`Embeds`]). Texts are tokenized here,
//! off the async workers like every prompt, and cut as sentence-transformers cuts them (the
//! first tokens the model reads) unless the request asks for vLLM's `truncate_prompt_tokens`
//! (the last k). Token-id inputs are read as given, special tokens included, as vLLM reads
//! them; one longer than the model reads is refused unless `truncate_prompt_tokens` says where
//! to cut it.

use super::{Limits, Result};
use crate::error::ValidationError;
use crate::openai_types::{EmbeddingInput, EmbeddingRequest};
use braid_embedding::{Keep, SentenceEmbedder};
use braid_engine::{EmbeddingModel, Pooling};
use braid_model::LoadedModel;

/// What validation needs of a model that embeds.
pub trait Embeds {
    fn id(&self) -> &str;
    fn dimensions(&self) -> usize;
    /// Most tokens one text may have, special tokens included.
    fn max_tokens(&self) -> usize;
    fn vocab_size(&self) -> usize;
    /// A text's tokens, special tokens included, cut as `keep` says.
    fn tokenize(&self, text: &str, keep: Keep) -> std::result::Result<Vec<u32>, String>;
}

impl Embeds for SentenceEmbedder {
    fn id(&self) -> &str {
        SentenceEmbedder::id(self)
    }
    fn dimensions(&self) -> usize {
        SentenceEmbedder::dimensions(self)
    }
    fn max_tokens(&self) -> usize {
        SentenceEmbedder::max_tokens(self)
    }
    fn vocab_size(&self) -> usize {
        SentenceEmbedder::vocab_size(self)
    }
    fn tokenize(&self, text: &str, keep: Keep) -> std::result::Result<Vec<u32>, String> {
        SentenceEmbedder::tokenize(self, text, keep).map_err(|e| e.to_string())
    }
}

/// The generation model as an embedder (`--pooling`): a text is its prompt, BOS where the model
/// puts one, and at most what the context and `--max-prompt-tokens` leave room for.
pub struct PooledModel<'a> {
    pub model: &'a LoadedModel,
    pub id: &'a str,
    pub max_tokens: usize,
}

impl Embeds for PooledModel<'_> {
    fn id(&self) -> &str {
        self.id
    }
    fn dimensions(&self) -> usize {
        self.model.config().hidden
    }
    fn max_tokens(&self) -> usize {
        self.max_tokens
    }
    fn vocab_size(&self) -> usize {
        self.model.tokenizer.vocab_size()
    }
    fn tokenize(&self, text: &str, keep: Keep) -> std::result::Result<Vec<u32>, String> {
        let mut ids = self
            .model
            .tokenizer
            .encode_prompt(text)
            .map_err(|e| e.to_string())?;
        match keep {
            Keep::First(n) => ids.truncate(n.min(self.max_tokens)),
            Keep::Last(n) => {
                let n = n.min(self.max_tokens);
                ids.drain(..ids.len().saturating_sub(n));
            }
        }
        Ok(ids)
    }
}

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

/// The model an embedding request runs on: the one it names, or the sentence model, else the
/// generation model when it pools. A model that does not embed is a 400 naming those that do.
pub fn check_embedding_model(
    requested: Option<&str>,
    embedder: Option<&SentenceEmbedder>,
    pooling: Option<Pooling>,
    limits: &Limits,
) -> Result<EmbeddingModel> {
    let served = limits.served_model_name.as_str();
    let embeds: Vec<String> = embedder
        .map(|e| format!("`{}`", e.id()))
        .into_iter()
        .chain(pooling.map(|_| format!("`{served}`")))
        .collect();
    let does_not_embed = |requested: &str| ValidationError::WrongModelKind {
        requested: requested.to_string(),
        cannot: "generates text and does not embed",
        serving: if embeds.is_empty() {
            "none (start the server with --embedding-model DIR, or --pooling to embed with this model)".into()
        } else {
            embeds.join(", ")
        },
    };
    let pooled = || pooling.map(|_| EmbeddingModel::Generation);
    match requested.filter(|m| !m.is_empty()) {
        None if embedder.is_some() => Ok(EmbeddingModel::Sentence),
        Some(m) if embedder.is_some_and(|e| m == e.id()) => Ok(EmbeddingModel::Sentence),
        None => pooled().ok_or_else(|| does_not_embed(served)),
        Some(m) if m == served => pooled().ok_or_else(|| does_not_embed(m)),
        Some(m) => Err(ValidationError::ModelNotFound {
            requested: m.to_string(),
            served: match embedder {
                Some(e) => format!("{served}` and `{}", e.id()),
                None => served.to_string(),
            },
        }),
    }
}

pub fn embedding(
    req: &EmbeddingRequest,
    embedder: &dyn Embeds,
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
            .map_err(ValidationError::Tokenize)
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
