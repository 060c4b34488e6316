//! braid's model: a GGUF (llama, qwen2, qwen3 or gemma3) loaded into packed weights, and one
//! forward pass over a step that mixes prompt slices and decode tokens of many sequences, each
//! attending only to its own blocks of a shared, preallocated KV pool; then sampling.
//!
//! The arithmetic lives in braid-kernels and the text side (tokenizer, chat template,
//! constraints) in braid-text; this crate puts a model together from them. It knows nothing
//! of requests, queues or HTTP: the scheduler decides what a step holds.

mod activations;
pub mod architecture;
pub mod config;
pub mod engine_bench;
pub mod error;
pub mod generate;
mod gguf_bounds;
pub mod hub;
pub mod kernel_comparison;
pub mod model;
mod rms_norm;
pub mod rope;
pub mod sampling;
mod sampling_weights;
#[cfg(any(test, feature = "test-util"))]
pub mod tiny_gguf;
pub mod weights;

pub use braid_kernels::{KvDtype, KvPool};
pub use config::ModelConfig;
pub use error::{ModelError, Result};
pub use model::{BatchEntry, Model, Workspace};
pub use sampling::{score_token, Sampled, Sampler, SamplingParams};

use braid_text::{ChatTemplate, Grammars, Tokenizer};
use candle_core::quantized::gguf_file::Content;
use std::path::{Path, PathBuf};

/// Where scripts/fetch-model.sh puts the default model.
pub const DEFAULT_MODEL_PATH: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// A model ready to serve: weights, tokenizer and chat template from one GGUF.
pub struct LoadedModel {
    pub path: PathBuf,
    pub model: Model,
    pub tokenizer: Tokenizer,
    /// None when the GGUF has no template and none was given: the model cannot chat.
    pub chat_template: Option<ChatTemplate>,
    /// Structured outputs over this tokenizer, built once; the error says why this model
    /// cannot have them.
    pub grammars: std::result::Result<Grammars, String>,
}

impl LoadedModel {
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_with_chat_template(path, None)
    }

    /// Loads the model with `chat_template` (a Jinja source) in place of the GGUF's own.
    pub fn load_with_chat_template(path: &Path, chat_template: Option<&str>) -> Result<Self> {
        if !path.exists() {
            return Err(ModelError::FileMissing {
                path: path.to_path_buf(),
            });
        }
        let ct = read_content(path)?;
        let config = ModelConfig::from_gguf(&ct, path)?;
        let tokenizer = Tokenizer::from_gguf(&ct).map_err(|e| ModelError::Unsupported {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if tokenizer.vocab_size() != config.vocab_size {
            return Err(ModelError::Unsupported {
                path: path.to_path_buf(),
                reason: format!(
                    "tokenizer has {} tokens, model {}",
                    tokenizer.vocab_size(),
                    config.vocab_size
                ),
            });
        }
        let special = |key: &str| {
            ct.metadata
                .get(key)
                .and_then(|v| v.to_u32().ok())
                .map(|id| String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned())
                .unwrap_or_default()
        };
        let source = chat_template.or_else(|| {
            ct.metadata
                .get("tokenizer.chat_template")
                .and_then(|v| v.to_string().ok())
                .map(String::as_str)
        });
        let chat_template = source
            .map(|source| {
                ChatTemplate::new(
                    source,
                    special("tokenizer.ggml.bos_token_id"),
                    special("tokenizer.ggml.eos_token_id"),
                )
            })
            .transpose()
            .map_err(|e| ModelError::Unsupported {
                path: path.to_path_buf(),
                reason: format!("{e}; pass --chat-template FILE to use another template"),
            })?;
        let weights = weights::load(&ct, path, &config)?;
        let grammars = Grammars::new(&tokenizer);
        if let Err(e) = &grammars {
            tracing::warn!("no structured outputs for this model: {e}");
        }
        Ok(Self {
            grammars,
            path: path.to_path_buf(),
            model: Model::new(config, weights),
            tokenizer,
            chat_template,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.model.config
    }
}

/// The file's metadata and tensor table, once `gguf_bounds` has found them within the file.
fn read_content(path: &Path) -> Result<Content> {
    gguf_bounds::check(path)?;
    let file = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut reader = std::io::BufReader::new(file);
    Content::read(&mut reader).map_err(|e| ModelError::Corrupt {
        path: path.to_path_buf(),
        reason: error::candle_message(e),
    })
}
