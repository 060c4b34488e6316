//! What a sentence-transformers directory says about its model: which modules run in which
//! order (`modules.json`), how tokens become one vector (`1_Pooling/config.json`), where texts
//! are cut (`sentence_bert_config.json`), and the encoder's shape (`config.json`).
//!
//! Read and checked before any weight is: a directory that is not a BERT sentence model is
//! refused with the file and the reason, not with a tensor name missing deep inside candle.

use crate::error::EmbeddingError;
use crate::pooling::Pooling;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The files a sentence-transformers BERT directory must have.
pub const REQUIRED_FILES: [&str; 5] = [
    "modules.json",
    "config.json",
    "tokenizer.json",
    "model.safetensors",
    "sentence_bert_config.json",
];

/// How the directory says its model is used.
#[derive(Clone, Debug)]
pub struct StLayout {
    pub dir: PathBuf,
    pub pooling: Pooling,
    /// A Normalize module follows the pooling: vectors have unit length.
    pub normalize: bool,
    /// Longest input in tokens, special tokens included (`max_seq_length`).
    pub max_tokens: usize,
    /// The encoder's `config.json`, for `candle_transformers::models::bert::Config`.
    pub bert_config: Value,
    /// The vector's length (`word_embedding_dimension`).
    pub dimensions: usize,
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    word_embedding_dimension: usize,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: usize,
}

impl StLayout {
    pub fn read(dir: &Path) -> Result<Self, EmbeddingError> {
        if !dir.is_dir() {
            return Err(EmbeddingError::FileMissing {
                dir: dir.to_path_buf(),
                file: "(the directory itself)",
            });
        }
        for file in REQUIRED_FILES {
            if !dir.join(file).is_file() {
                return Err(EmbeddingError::FileMissing {
                    dir: dir.to_path_buf(),
                    file,
                });
            }
        }
        let unsupported = |why: String| EmbeddingError::Unsupported {
            dir: dir.to_path_buf(),
            why,
        };
        let modules: Vec<Module> = read_json(dir, "modules.json")?;
        let kinds: Vec<&str> = modules
            .iter()
            .map(|m| m.kind.rsplit('.').next().unwrap_or(&m.kind))
            .collect();
        let (pooling_dir, normalize) = match kinds.as_slice() {
            ["Transformer", "Pooling"] => (&modules[1].path, false),
            ["Transformer", "Pooling", "Normalize"] => (&modules[1].path, true),
            _ => {
                return Err(unsupported(format!(
                "modules.json lists {kinds:?}, not Transformer, Pooling and optionally Normalize"
            )))
            }
        };
        if !modules[0].path.is_empty() {
            return Err(unsupported(format!(
                "its Transformer module lives in `{}`, not in the directory itself",
                modules[0].path
            )));
        }
        let pooling_file = dir.join(pooling_dir).join("config.json");
        let pool: PoolingConfig =
            serde_json::from_str(&std::fs::read_to_string(&pooling_file).map_err(|e| {
                EmbeddingError::Unreadable {
                    dir: dir.to_path_buf(),
                    file: "the Pooling module's config.json",
                    why: e.to_string(),
                }
            })?)
            .map_err(|e| EmbeddingError::Unreadable {
                dir: dir.to_path_buf(),
                file: "the Pooling module's config.json",
                why: e.to_string(),
            })?;
        let modes = [
            (pool.pooling_mode_mean_tokens, Some(Pooling::Mean), "mean"),
            (pool.pooling_mode_cls_token, Some(Pooling::Cls), "cls"),
            (
                pool.pooling_mode_lasttoken,
                Some(Pooling::Last),
                "lasttoken",
            ),
            (pool.pooling_mode_max_tokens, None, "max"),
            (
                pool.pooling_mode_mean_sqrt_len_tokens,
                None,
                "mean_sqrt_len",
            ),
            (pool.pooling_mode_weightedmean_tokens, None, "weightedmean"),
        ];
        let on: Vec<_> = modes.iter().filter(|m| m.0).collect();
        let pooling = match on.as_slice() {
            [(_, Some(p), _)] => *p,
            [(_, None, name)] => {
                return Err(unsupported(format!(
                    "its pooling is `{name}`; braid pools by mean, cls or last token"
                )))
            }
            _ => {
                let names: Vec<_> = on.iter().map(|m| m.2).collect();
                return Err(unsupported(format!(
                    "its Pooling config turns on {names:?}; braid needs exactly one of mean, cls, lasttoken"
                )));
            }
        };
        let sbert: SentenceBertConfig = read_json(dir, "sentence_bert_config.json")?;
        let bert_config: Value = read_json(dir, "config.json")?;
        let model_type = bert_config.get("model_type").and_then(Value::as_str);
        if model_type != Some("bert") {
            return Err(unsupported(format!(
                "config.json's model_type is {model_type:?}, not \"bert\""
            )));
        }
        let hidden = bert_config.get("hidden_size").and_then(Value::as_u64);
        if hidden != Some(pool.word_embedding_dimension as u64) {
            return Err(unsupported(format!(
                "the Pooling module's word_embedding_dimension {} is not config.json's hidden_size {hidden:?}",
                pool.word_embedding_dimension
            )));
        }
        let positions = bert_config
            .get("max_position_embeddings")
            .and_then(Value::as_u64)
            .unwrap_or(512) as usize;
        if sbert.max_seq_length == 0 || sbert.max_seq_length > positions {
            return Err(unsupported(format!(
                "sentence_bert_config.json's max_seq_length {} is not within its {positions} positions",
                sbert.max_seq_length
            )));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            pooling,
            normalize,
            max_tokens: sbert.max_seq_length,
            bert_config,
            dimensions: pool.word_embedding_dimension,
        })
    }
}

fn read_json<T: serde::de::DeserializeOwned>(
    dir: &Path,
    file: &'static str,
) -> Result<T, EmbeddingError> {
    let unreadable = |why: String| EmbeddingError::Unreadable {
        dir: dir.to_path_buf(),
        file,
        why,
    };
    let text = std::fs::read_to_string(dir.join(file)).map_err(|e| unreadable(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| unreadable(e.to_string()))
}
