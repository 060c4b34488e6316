//! The model's shape, read from GGUF metadata, so braid runs any llama-architecture GGUF and
//! not only the default model.

use crate::error::{ModelError, Result};
use candle_core::quantized::gguf_file::{Content, Value};
use std::path::Path;

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub name: String,
    pub num_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
}

impl ModelConfig {
    pub fn from_gguf(ct: &Content, path: &Path) -> Result<Self> {
        let unsupported = |reason: String| ModelError::Unsupported {
            path: path.to_path_buf(),
            reason,
        };
        let arch = match ct.metadata.get("general.architecture") {
            Some(Value::String(s)) => s.clone(),
            _ => {
                return Err(unsupported(
                    "no general.architecture in its metadata".into(),
                ))
            }
        };
        if arch != "llama" {
            return Err(unsupported(format!(
                "architecture `{arch}`; braid runs `llama` models"
            )));
        }
        let int = |key: &str| -> Result<usize> {
            let full = format!("{arch}.{key}");
            ct.metadata
                .get(&full)
                .and_then(|v| v.to_u64().ok().or_else(|| v.to_u32().map(u64::from).ok()))
                .map(|v| v as usize)
                .ok_or_else(|| unsupported(format!("metadata key `{full}` is missing")))
        };
        let float = |key: &str, default: f32| -> f32 {
            ct.metadata
                .get(&format!("{arch}.{key}"))
                .and_then(|v| v.to_f32().ok())
                .unwrap_or(default)
        };
        let hidden = int("embedding_length")?;
        let num_heads = int("attention.head_count")?;
        let num_kv_heads = int("attention.head_count_kv").unwrap_or(num_heads);
        if num_heads == 0
            || hidden % num_heads != 0
            || num_kv_heads == 0
            || num_heads % num_kv_heads != 0
        {
            return Err(unsupported(format!(
                "{num_heads} heads / {num_kv_heads} KV heads for width {hidden}"
            )));
        }
        let head_dim = hidden / num_heads;
        if head_dim % 2 != 0 || hidden % 32 != 0 {
            return Err(unsupported(format!(
                "width {hidden} / head size {head_dim} (need multiples of 32 and 2)"
            )));
        }
        let vocab_size = match int("vocab_size") {
            Ok(v) => v,
            Err(e) => match ct.metadata.get("tokenizer.ggml.tokens") {
                Some(Value::Array(a)) => a.len(),
                _ => return Err(e),
            },
        };
        Ok(Self {
            name: ct
                .metadata
                .get("general.name")
                .and_then(|v| v.to_string().ok().cloned())
                .unwrap_or_else(|| {
                    path.file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default()
                }),
            num_layers: int("block_count")?,
            hidden,
            ffn: int("feed_forward_length")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            context_length: int("context_length").unwrap_or(2048),
            rope_base: float("rope.freq_base", 10_000.0),
            rms_eps: float("attention.layer_norm_rms_epsilon", 1e-5),
        })
    }

    /// Elements of K and V one token occupies in the cache, all layers together.
    pub fn kv_floats_per_token(&self) -> usize {
        2 * self.num_layers * self.num_kv_heads * self.head_dim
    }
}
