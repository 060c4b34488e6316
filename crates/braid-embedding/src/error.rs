//! Why an embedding model did not load or run. Each load error names the file and the fix,
//! because the person reading it is starting a server.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EmbeddingError {
    #[error(
        "embedding model directory {dir} lacks {file}; run scripts/fetch-model.sh all-minilm-l6-v2, \
         or point --embedding-model at a sentence-transformers model directory"
    )]
    FileMissing { dir: PathBuf, file: &'static str },
    #[error("{file} in {dir} cannot be read: {why}")]
    Unreadable {
        dir: PathBuf,
        file: &'static str,
        why: String,
    },
    #[error(
        "{dir} is not a model braid can embed with: {why} (braid embeds with sentence-transformers \
         BERT models: a Transformer module of model_type bert, then Pooling, optionally Normalize)"
    )]
    Unsupported { dir: PathBuf, why: String },
    #[error("tokenizing for the embedding model failed: {0}")]
    Tokenize(String),
}
