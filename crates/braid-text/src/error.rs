//! How reading a tokenizer or a chat template can fail, each with a message a user can act on.

#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
}

pub type Result<T> = std::result::Result<T, TextError>;
