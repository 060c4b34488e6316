//! The text side of a model: what turns requests into token ids and token ids back into
//! answers, apart from the weights that compute on them.
//!
//! Tokenizers come from a GGUF's metadata and give llama.cpp's ids; chat templates render
//! conversations exactly as the model was trained on them; tool calls are written and read
//! back in the syntaxes models were trained on; constraints (JSON schemas, regexes, GBNF and
//! Lark grammars) become per-token masks. None of it touches weights, so it is tested with a
//! tiny vocabulary and no model.

pub mod chat_template;
pub mod constraint;
mod error;
pub mod gbnf;
pub mod python_json;
pub mod reasoning;
#[cfg(any(test, feature = "test-util"))]
pub mod tiny_vocab;
pub mod tokenizer;
pub mod tool_calls;

pub use chat_template::{ChatMessage, ChatTemplate};
pub use constraint::{Constraint, Grammars, TokenConstraint};
pub use error::{Result, TextError};
pub use tokenizer::{IncrementalDecoder, NamedTokens, PlainMarks, Tokenizer};
