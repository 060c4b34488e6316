//! braid-embedding: the models that turn a text into one vector, for `/v1/embeddings`.
//!
//! Retrieval comes before generation, so braid embeds in the same process and the same steps
//! as it generates (the engine runs an embedding batch inside a step, sized by the same cost
//! model). The model is a sentence-transformers directory: a BERT encoder (loaded and checked
//! by `candle_transformers::models::bert`, run by `bert_encoder.rs`) with the `tokenizers`
//! crate's tokenizer, then the pooling and normalisation its `modules.json` lists. Those files, not braid, say how the
//! model is used, so any directory laid out the same way gives the vectors the
//! sentence-transformers library gives. Anything else is refused by name at start.
//!
//! Nothing here knows of requests or steps: a batch of token lists in, one vector per list
//! out. Pooling is plain arithmetic over rows (`pooling.rs`), so a decoder model's hidden
//! states can be pooled the same way.

mod bert_encoder;
mod error;
pub mod pooling;
mod sentence_embedder;
mod st_layout;

pub use error::EmbeddingError;
pub use pooling::Pooling;
pub use sentence_embedder::{Keep, SentenceEmbedder};
pub use st_layout::StLayout;
