//! Every way loading or running the model can fail, each with a message a user can act on.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model file {path} does not exist; run scripts/fetch-model.sh to fetch the default model, or pass --model PATH to a GGUF of a llama, qwen2, qwen3 or gemma3 model")]
    FileMissing { path: PathBuf },
    #[error("cannot read model file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("model file {path} is not a readable GGUF ({reason}); it may be truncated or corrupt: delete it and run scripts/fetch-model.sh again")]
    Corrupt { path: PathBuf, reason: String },
    #[error("model file {path} is not supported: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error(transparent)]
    Text(#[from] braid_text::TextError),
    #[error("sequence of {len} tokens exceeds the model's context of {max} tokens")]
    ContextOverflow { len: usize, max: usize },
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}

pub type Result<T> = std::result::Result<T, ModelError>;

/// A candle error's message without the backtrace candle attaches when RUST_BACKTRACE is set:
/// users need the reason, not our stack.
pub fn candle_message(e: candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_message(*inner),
        other => other.to_string(),
    }
}
