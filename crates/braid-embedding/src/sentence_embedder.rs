//! A sentence-transformers BERT model, loaded and run: token lists in, one vector each out.
//!
//! A batch is its texts' rows stacked, with no padding (`bert_encoder.rs`), so a text's vector
//! is the same bits whatever it was batched with. The tokenizer's own truncation and padding
//! settings (all-MiniLM-L6-v2's `tokenizer.json` says 128 tokens, padded to 128) are turned
//! off: sentence-transformers cuts at `max_seq_length`, and so does braid.

use crate::bert_encoder::BertEncoder;
use crate::error::EmbeddingError;
use crate::pooling::normalize;
use crate::st_layout::StLayout;
use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::path::Path;
use tokenizers::{PostProcessor, Tokenizer, TruncationDirection};

pub struct SentenceEmbedder {
    layout: StLayout,
    encoder: BertEncoder,
    tokenizer: Tokenizer,
    /// Tokens the post-processor adds to one text (`[CLS]`, `[SEP]`).
    added_tokens: usize,
    id: String,
}

/// Which end of a text is kept when it is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// The beginning, as sentence-transformers cuts at `max_seq_length`.
    First(usize),
    /// The end, as vLLM's `truncate_prompt_tokens` cuts.
    Last(usize),
}

impl SentenceEmbedder {
    /// Loads the directory, refusing anything but a sentence-transformers BERT model by name.
    pub fn load(dir: &Path) -> Result<Self, EmbeddingError> {
        let layout = StLayout::read(dir)?;
        let unsupported = |why: String| EmbeddingError::Unsupported {
            dir: dir.to_path_buf(),
            why,
        };
        let config: Config = serde_json::from_value(layout.bert_config.clone())
            .map_err(|e| unsupported(format!("config.json is not a BERT config: {e}")))?;
        let weights_file = dir.join("model.safetensors");
        let tensors = candle_core::safetensors::load(&weights_file, &Device::Cpu).map_err(|e| {
            EmbeddingError::Unreadable {
                dir: dir.to_path_buf(),
                file: "model.safetensors",
                why: e.to_string(),
            }
        })?;
        // candle-transformers' loader checks every tensor's name and shape against the
        // config; the forward braid runs then takes the same tensors.
        let vb = VarBuilder::from_tensors(tensors.clone(), DType::F32, &Device::Cpu);
        BertModel::load(vb, &config)
            .map_err(|e| unsupported(format!("model.safetensors is not a BERT encoder: {e}")))?;
        let encoder = BertEncoder::new(&tensors, &config).map_err(unsupported)?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| {
            EmbeddingError::Unreadable {
                dir: dir.to_path_buf(),
                file: "tokenizer.json",
                why: e.to_string(),
            }
        })?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| unsupported(format!("tokenizer.json: {e}")))?;
        let added_tokens = tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        if added_tokens >= layout.max_tokens {
            return Err(unsupported(format!(
                "its tokenizer adds {added_tokens} tokens, leaving none of max_seq_length {}",
                layout.max_tokens
            )));
        }
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        tracing::info!(
            model = %id,
            dimensions = layout.dimensions,
            max_tokens = layout.max_tokens,
            pooling = layout.pooling.name(),
            normalize = layout.normalize,
            "embedding model loaded"
        );
        Ok(Self {
            layout,
            encoder,
            tokenizer,
            added_tokens,
            id,
        })
    }

    /// The model's id: its directory's name.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn dimensions(&self) -> usize {
        self.layout.dimensions
    }

    /// Longest input in tokens, special tokens included.
    pub fn max_tokens(&self) -> usize {
        self.layout.max_tokens
    }

    /// Token ids run from 0 to this, exclusive.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer
            .get_vocab_size(true)
            .min(self.encoder.vocab_size())
    }

    pub fn layout(&self) -> &StLayout {
        &self.layout
    }

    /// Tokens the model reads for `text`, special tokens included, cut as `keep` says (at
    /// most [`max_tokens`](Self::max_tokens)).
    pub fn tokenize(&self, text: &str, keep: Keep) -> Result<Vec<u32>, EmbeddingError> {
        let mut enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| EmbeddingError::Tokenize(e.to_string()))?;
        let (limit, direction) = match keep {
            Keep::First(n) => (n, TruncationDirection::Right),
            Keep::Last(n) => (n, TruncationDirection::Left),
        };
        let limit = limit.min(self.layout.max_tokens);
        let content = limit.saturating_sub(self.added_tokens).max(1);
        if enc.len() > content {
            enc.truncate(content, 0, direction);
        }
        let enc = self
            .tokenizer
            .post_process(enc, None, true)
            .map_err(|e| EmbeddingError::Tokenize(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// One vector per token list, from one forward over them all. Every list is non-empty, at
    /// most [`max_tokens`](Self::max_tokens) long, and of ids below
    /// [`vocab_size`](Self::vocab_size).
    pub fn embed(&self, texts: &[&[u32]]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let longest = texts.iter().map(|t| t.len()).max().unwrap_or(0);
        assert!(
            texts.iter().all(|t| !t.is_empty()) && longest <= self.layout.max_tokens,
            "embedding inputs are validated before they reach the model"
        );
        let rows = self.encoder.forward(texts);
        let dim = self.layout.dimensions;
        Ok(texts
            .iter()
            .scan(0, |start, t| {
                let text_rows = &rows[*start * dim..(*start + t.len()) * dim];
                *start += t.len();
                let mut v = self.layout.pooling.pool(text_rows, t.len(), dim);
                if self.layout.normalize {
                    normalize(&mut v);
                }
                Some(v)
            })
            .collect())
    }
}

#[cfg(test)]
#[path = "sentence_embedder_tests.rs"]
mod tests;
