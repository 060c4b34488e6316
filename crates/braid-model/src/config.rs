//! The model's shape and its architecture's pieces, read from GGUF metadata.
//!
//! The families braid runs (llama, qwen2, qwen3, gemma3) are one transformer that differs in a
//! handful of places: biases on Q/K/V, RMSNorm on each query and key head, norms after
//! attention and the MLP, the activation, how rope pairs dimensions, and sliding-window layers.
//! Each difference is a field here, set from the architecture and the metadata, so the forward
//! is written once and reads the fields instead of being copied per family.

use crate::error::{ModelError, Result};
use braid_kernels::KvShape;
use candle_core::quantized::gguf_file::{Content, Value};
use std::path::Path;

pub use crate::architecture::{Activation, Architecture, RopeStyle};

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub name: String,
    pub architecture: Architecture,
    pub num_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    /// Width of one query or key head; `num_heads · head_dim` need not equal `hidden`
    /// (Qwen3 and Gemma 3 have wider attention than their residual stream).
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rope_base: f32,
    /// Multiplies every rope angle: `1 / rope.scaling.factor` for linear scaling.
    pub rope_scale: f32,
    pub rope_style: RopeStyle,
    pub rms_eps: f32,
    pub activation: Activation,
    /// Scales the embedding rows as they are read (Gemma: √hidden).
    pub embedding_scale: f32,
    /// Sliding-window attention: the window, and which layers use it.
    pub sliding_window: Option<SlidingWindow>,
    /// `tanh(x / c) · c` on the logits (Gemma 2's final soft-capping, when a file sets it).
    pub logit_softcap: Option<f32>,
}

/// Layers whose keys are limited to the last `size` positions, with their own rope base.
#[derive(Clone, Debug)]
pub struct SlidingWindow {
    pub size: usize,
    /// One flag per layer: whether it slides.
    pub layers: Vec<bool>,
    pub rope_base: f32,
}

/// Largest sizes a file may claim, checked before anything is allocated by them: a context of
/// 2^40 tokens or a million layers is refused by name instead of aborting in the allocation of
/// a RoPE table or of the layers. Far above any small model's (SmolLM2: 30 layers, 576 wide,
/// 8,192 tokens of context).
const SIZE_BOUNDS: [(&str, u64); 11] = [
    ("block_count", 1024),
    ("embedding_length", 1 << 16),
    ("feed_forward_length", 1 << 20),
    ("attention.head_count", 1024),
    ("attention.head_count_kv", 1024),
    ("attention.key_length", 1024),
    ("attention.value_length", 1024),
    ("rope.dimension_count", 1024),
    ("context_length", 1 << 20),
    ("vocab_size", 1 << 22),
    ("attention.sliding_window", 1 << 20),
];

impl ModelConfig {
    pub fn from_gguf(ct: &Content, path: &Path) -> Result<Self> {
        let unsupported = |reason: String| ModelError::Unsupported {
            path: path.to_path_buf(),
            reason,
        };
        let arch_name = match ct.metadata.get("general.architecture") {
            Some(Value::String(s)) => s.clone(),
            _ => {
                return Err(unsupported(
                    "no general.architecture in its metadata".into(),
                ))
            }
        };
        let Some(architecture) = Architecture::from_name(&arch_name) else {
            return Err(unsupported(format!(
                "architecture `{arch_name}`; braid runs {}",
                Architecture::names()
            )));
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let get = |k: &str| ct.metadata.get(&key(k));
        let int = |k: &str| -> Result<usize> {
            let v = get(k)
                .and_then(|v| v.to_u64().ok().or_else(|| v.to_u32().map(u64::from).ok()))
                .ok_or_else(|| unsupported(format!("metadata key `{}` is missing", key(k))))?;
            let least = u64::from(k != "attention.sliding_window");
            match SIZE_BOUNDS.iter().find(|(name, _)| *name == k) {
                Some(&(_, max)) if v < least || v > max => Err(unsupported(format!(
                    "metadata key `{}` is {v}; braid reads {least} to {max}",
                    key(k)
                ))),
                _ => Ok(v as usize),
            }
        };
        // A key that may be absent; present, it is bounded like any other.
        let opt = |k: &str| -> Result<Option<usize>> {
            match get(k) {
                Some(_) => int(k).map(Some),
                None => Ok(None),
            }
        };
        let float = |k: &str| get(k).and_then(|v| v.to_f32().ok());
        let hidden = int("embedding_length")?;
        let num_heads = int("attention.head_count")?;
        let num_kv_heads = opt("attention.head_count_kv")?.unwrap_or(num_heads);
        if num_heads == 0 || num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return Err(unsupported(format!(
                "{num_heads} heads / {num_kv_heads} KV heads"
            )));
        }
        let head_dim = match opt("attention.key_length")? {
            Some(d) => d,
            None if hidden % num_heads == 0 => hidden / num_heads,
            None => {
                return Err(unsupported(format!(
                    "{num_heads} heads do not divide width {hidden}"
                )))
            }
        };
        if let Some(v) = opt("attention.value_length")? {
            if v != head_dim {
                return Err(unsupported(format!(
                    "value heads of {v} differ from key heads of {head_dim}"
                )));
            }
        }
        if head_dim % 16 != 0 || hidden % 32 != 0 {
            return Err(unsupported(format!(
                "width {hidden} / head size {head_dim} (need multiples of 32 and 16)"
            )));
        }
        if let Some(rot) = opt("rope.dimension_count")? {
            if rot != head_dim {
                return Err(unsupported(format!(
                    "rope over {rot} of {head_dim} head dimensions (partial rotary embedding)"
                )));
            }
        }
        let rope_scale = match get("rope.scaling.type").and_then(|v| v.to_string().ok()) {
            None => 1.0,
            Some(t) if t == "none" => 1.0,
            Some(t) if t == "linear" => 1.0 / float("rope.scaling.factor").unwrap_or(1.0),
            Some(t) => {
                return Err(unsupported(format!(
                    "rope scaling `{t}` (braid applies none, linear, and llama3 frequency factors)"
                )))
            }
        };
        let vocab_size = match opt("vocab_size")? {
            Some(v) => v,
            None => match ct.metadata.get("tokenizer.ggml.tokens") {
                Some(Value::Array(a)) => a.len(),
                _ => {
                    return Err(unsupported(format!(
                        "metadata key `{}` is missing",
                        key("vocab_size")
                    )))
                }
            },
        };
        let num_layers = int("block_count")?;
        let rope_base = float("rope.freq_base").unwrap_or(10_000.0);
        let flags = architecture.flags();
        let sliding_window = match opt("attention.sliding_window")? {
            Some(size) if size > 0 && flags.sliding_window => Some(SlidingWindow {
                size,
                layers: sliding_layers(get("attention.sliding_window_pattern"), num_layers),
                rope_base: float("rope.freq_base_swa").unwrap_or(10_000.0),
            }),
            _ => None,
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
            architecture,
            num_layers,
            hidden,
            ffn: int("feed_forward_length")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size,
            context_length: opt("context_length")?.unwrap_or(2048),
            rope_base,
            rope_scale,
            rope_style: flags.rope_style,
            rms_eps: float("attention.layer_norm_rms_epsilon").unwrap_or(1e-5),
            activation: flags.activation,
            embedding_scale: if flags.scaled_embedding {
                (hidden as f32).sqrt()
            } else {
                1.0
            },
            sliding_window,
            logit_softcap: float("final_logit_softcapping").filter(|&c| c > 0.0),
        })
    }

    /// A llama-shaped config for tests that need no file.
    pub fn llama(
        hidden: usize,
        ffn: usize,
        num_heads: usize,
        num_kv_heads: usize,
        context_length: usize,
    ) -> Self {
        Self {
            name: "test".into(),
            architecture: Architecture::Llama,
            num_layers: 1,
            hidden,
            ffn,
            num_heads,
            num_kv_heads,
            head_dim: hidden / num_heads,
            vocab_size: 8,
            context_length,
            rope_base: 1e4,
            rope_scale: 1.0,
            rope_style: RopeStyle::Adjacent,
            rms_eps: 1e-5,
            activation: Activation::Silu,
            embedding_scale: 1.0,
            sliding_window: None,
            logit_softcap: None,
        }
    }

    /// Width of all query heads together (the attention output's width).
    pub fn q_width(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_width(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// What the KV pool stores per token: every layer's KV heads.
    pub fn kv_shape(&self) -> KvShape {
        KvShape {
            num_layers: self.num_layers,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
        }
    }

    /// The window of layer `layer`'s keys, if it slides.
    pub fn window(&self, layer: usize) -> Option<usize> {
        self.sliding_window
            .as_ref()
            .filter(|w| w.layers.get(layer).copied().unwrap_or(false))
            .map(|w| w.size)
    }

    pub fn has_qkv_bias(&self) -> bool {
        self.architecture.flags().qkv_bias
    }

    pub fn has_qk_norm(&self) -> bool {
        self.architecture.flags().qk_norm
    }

    pub fn has_post_norms(&self) -> bool {
        self.architecture.flags().post_norms
    }
}

/// Which layers slide: `sliding_window_pattern` as one flag per layer, or as a period `n` where
/// every `n`-th layer is global (llama.cpp's reading; Gemma 3 defaults to 6).
fn sliding_layers(pattern: Option<&Value>, num_layers: usize) -> Vec<bool> {
    if let Some(Value::Array(flags)) = pattern {
        return (0..num_layers)
            .map(|i| flags.get(i).and_then(|v| v.to_bool().ok()).unwrap_or(false))
            .collect();
    }
    let n = pattern
        .and_then(|v| v.to_u32().ok())
        .map_or(6, |n| n as usize);
    (0..num_layers).map(|i| n == 0 || i % n < n - 1).collect()
}

impl From<&ModelConfig> for KvShape {
    fn from(cfg: &ModelConfig) -> Self {
        cfg.kv_shape()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::gguf_file::VersionedMagic;

    fn content(arch: &str, extra: &[(&str, Value)]) -> Content {
        let mut metadata: std::collections::HashMap<String, Value> = [
            (
                "general.architecture".to_string(),
                Value::String(arch.into()),
            ),
            (format!("{arch}.embedding_length"), Value::U32(640)),
            (format!("{arch}.attention.head_count"), Value::U32(4)),
            (format!("{arch}.attention.head_count_kv"), Value::U32(1)),
            (format!("{arch}.block_count"), Value::U32(18)),
            (format!("{arch}.feed_forward_length"), Value::U32(2048)),
            (format!("{arch}.vocab_size"), Value::U32(100)),
        ]
        .into_iter()
        .collect();
        for (k, v) in extra {
            metadata.insert(format!("{arch}.{k}"), v.clone());
        }
        Content {
            magic: VersionedMagic::GgufV3,
            metadata,
            tensor_infos: Default::default(),
            tensor_data_offset: 0,
        }
    }

    fn config(arch: &str, extra: &[(&str, Value)]) -> Result<ModelConfig> {
        ModelConfig::from_gguf(&content(arch, extra), Path::new("m.gguf"))
    }

    #[test]
    fn an_unknown_architecture_is_named_with_the_supported_ones() {
        let err = config("mamba", &[]).unwrap_err().to_string();
        for name in ["mamba", "m.gguf"]
            .into_iter()
            .chain(Architecture::ALL.map(Architecture::name))
        {
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn gemma3_slides_five_layers_in_six_with_its_own_rope_base() {
        let c = config(
            "gemma3",
            &[
                ("attention.key_length", Value::U32(256)),
                ("attention.sliding_window", Value::U32(512)),
                ("rope.freq_base", Value::F32(1e6)),
            ],
        )
        .unwrap();
        assert_eq!((c.head_dim, c.q_width(), c.kv_width()), (256, 1024, 256));
        let sliding: Vec<usize> = (0..18).filter(|&i| c.window(i).is_some()).collect();
        assert_eq!(sliding.len(), 15);
        assert!([5, 11, 17].iter().all(|i| c.window(*i).is_none()));
        assert_eq!(c.window(0), Some(512));
        let w = c.sliding_window.as_ref().unwrap();
        assert_eq!((w.rope_base, c.rope_base), (10_000.0, 1e6));
        assert_eq!(c.embedding_scale, 640f32.sqrt());
        assert_eq!(c.activation, Activation::GeluTanh);
        assert_eq!(c.rope_style, RopeStyle::Halves);
        assert!(c.has_qk_norm() && c.has_post_norms() && !c.has_qkv_bias());
    }

    #[test]
    fn families_differ_only_where_they_should() {
        let llama = config("llama", &[]).unwrap();
        assert_eq!(llama.rope_style, RopeStyle::Adjacent);
        assert_eq!(llama.head_dim, 160);
        assert!(!llama.has_qk_norm() && !llama.has_qkv_bias() && llama.sliding_window.is_none());
        assert!(config("qwen2", &[]).unwrap().has_qkv_bias());
        let qwen3 = config("qwen3", &[("attention.key_length", Value::U32(128))]).unwrap();
        assert!(qwen3.has_qk_norm() && !qwen3.has_post_norms());
        assert_eq!(qwen3.q_width(), 512);
        let linear = config(
            "llama",
            &[
                ("rope.scaling.type", Value::String("linear".into())),
                ("rope.scaling.factor", Value::F32(8.0)),
            ],
        )
        .unwrap();
        assert_eq!(linear.rope_scale, 0.125);
        let yarn = config(
            "llama",
            &[("rope.scaling.type", Value::String("yarn".into()))],
        );
        assert!(yarn.unwrap_err().to_string().contains("`yarn`"));
    }
}
