//! Tiny GGUFs with random weights and a byte-level tokenizer, written at test time, so tests do
//! not need real models of hundreds of megabytes: a llama ([`write`]) for the tests of loading,
//! the KV pool, batching and the server; one file per architecture ([`write_arch`]) that
//! llama.cpp also runs, for the architecture tests against its outputs; and llama files in any
//! mix of tensor types ([`TinyModel::llama_typed`]). Deterministic for a given seed.

use crate::architecture::Architecture;
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use std::path::Path;

pub use braid_text::tiny_vocab::SPECIAL_TOKENS;
pub const HIDDEN: usize = 64;
pub const LAYERS: usize = 2;
pub const CONTEXT: usize = 512;

/// Writes the model to `path`, with the tokenizer of `braid_text::tiny_vocab`: the three ChatML specials (ids 0–2), then one token
/// per byte, then a few merged tokens.
pub fn write(path: &Path, seed: u64) -> candle_core::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let vocab = braid_text::tiny_vocab::size();

    let (h, ffn, heads, kv_heads) = (HIDDEN, 128usize, 4usize, 2usize);
    let kv = kv_heads * (h / heads);
    let dev = Device::Cpu;
    let mut mat = |rows: usize, cols: usize, scale: f32| -> candle_core::Result<QTensor> {
        let data: Vec<f32> = (0..rows * cols)
            .map(|_| rng.random_range(-scale..scale))
            .collect();
        QTensor::quantize(
            &Tensor::from_vec(data, (rows, cols), &dev)?,
            GgmlDType::Q8_0,
        )
    };
    let mut tensors: Vec<(String, QTensor)> =
        vec![("token_embd.weight".into(), mat(vocab, h, 1.0)?)];
    let ones = |n: usize| {
        QTensor::quantize(
            &Tensor::ones(n, candle_core::DType::F32, &dev)?,
            GgmlDType::F32,
        )
    };
    tensors.push(("output_norm.weight".into(), ones(h)?));
    for i in 0..LAYERS {
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        tensors.push((p("attn_norm"), ones(h)?));
        tensors.push((p("ffn_norm"), ones(h)?));
        tensors.push((p("attn_q"), mat(h, h, 0.3)?));
        tensors.push((p("attn_k"), mat(kv, h, 0.3)?));
        tensors.push((p("attn_v"), mat(kv, h, 0.3)?));
        tensors.push((p("attn_output"), mat(h, h, 0.3)?));
        tensors.push((p("ffn_gate"), mat(ffn, h, 0.3)?));
        tensors.push((p("ffn_up"), mat(ffn, h, 0.3)?));
        tensors.push((p("ffn_down"), mat(h, ffn, 0.3)?));
    }

    let mut metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String("llama".into())),
        (
            "general.name".into(),
            Value::String("tiny-random-llama".into()),
        ),
        ("llama.block_count".into(), Value::U32(LAYERS as u32)),
        ("llama.context_length".into(), Value::U32(CONTEXT as u32)),
        ("llama.embedding_length".into(), Value::U32(h as u32)),
        ("llama.feed_forward_length".into(), Value::U32(ffn as u32)),
        (
            "llama.attention.head_count".into(),
            Value::U32(heads as u32),
        ),
        (
            "llama.attention.head_count_kv".into(),
            Value::U32(kv_heads as u32),
        ),
        ("llama.rope.freq_base".into(), Value::F32(10_000.0)),
        (
            "llama.rope.dimension_count".into(),
            Value::U32((h / heads) as u32),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            Value::F32(1e-5),
        ),
        ("llama.vocab_size".into(), Value::U32(vocab as u32)),
    ];
    metadata.extend(braid_text::tiny_vocab::metadata());
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut f = std::fs::File::create(path)?;
    gguf_file::write(&mut f, &md, &ts)
}

/// The architectures of [`write_arch`], each with the pieces that tell it apart, laid out as
/// llama.cpp's converter writes real files of that family, so that llama.cpp can run the same
/// file and serve as the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// `llama` as SmolLM2's, with random norms: the same weights as `Llama3`, without its
    /// frequency factors.
    Llama,
    /// `llama` with Llama 3's `rope_freqs.weight`.
    Llama3,
    /// Biases on Q, K and V; tied output.
    Qwen2,
    /// Per-head RMSNorm on q and k, head_dim from `attention.key_length` so that q is wider
    /// than the hidden state; an untied `output.weight`.
    Qwen3,
    /// Scaled embedding, norms before and after attention and the MLP, GELU MLP, q/k norm,
    /// five sliding-window layers of every six, tied output.
    Gemma3,
}

impl Arch {
    pub const ALL: [Arch; 5] = [
        Arch::Llama,
        Arch::Llama3,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Gemma3,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Llama3 => "llama3",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The architecture the file declares: Llama 3 files say `llama`.
    pub fn architecture(self) -> Architecture {
        match self {
            Arch::Llama | Arch::Llama3 => Architecture::Llama,
            Arch::Qwen2 => Architecture::Qwen2,
            Arch::Qwen3 => Architecture::Qwen3,
            Arch::Gemma3 => Architecture::Gemma3,
        }
    }
}

/// The sliding window of the tiny gemma3: shorter than the reference prompt.
pub const GEMMA3_SLIDING_WINDOW: usize = 8;

/// The tiny llama3's rope scaling, Llama 3.2's except for the original context: 64 instead of
/// 8192 puts the three bands of the formula (kept, interpolated, divided by the factor) inside
/// the 8 frequencies of a 16-wide head.
const LLAMA3_ROPE_SCALING: (f32, f32, f32, f32) = (32.0, 1.0, 4.0, 64.0);

/// Llama 3's frequency factors as llama.cpp's converter computes them: 1 for the high
/// frequencies, `factor` for the low ones, interpolated in between. The rope divides each
/// frequency by its factor.
pub fn llama3_rope_factors(head_dim: usize, base: f32) -> Vec<f32> {
    let (factor, low_freq_factor, high_freq_factor, original_context) = LLAMA3_ROPE_SCALING;
    let low_freq_wavelen = original_context / low_freq_factor;
    let high_freq_wavelen = original_context / high_freq_factor;
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / base.powf(2.0 * i as f32 / head_dim as f32);
            let wavelen = 2.0 * std::f32::consts::PI / freq;
            if wavelen < high_freq_wavelen {
                1.0
            } else if wavelen > low_freq_wavelen {
                factor
            } else {
                let smooth = (original_context / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

/// A GGUF in memory: metadata and tensors, written by [`TinyModel::write`].
pub struct TinyModel {
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<(String, QTensor)>,
}

struct Shape {
    arch: &'static str,
    hidden: usize,
    ffn: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    layers: usize,
}

/// Deterministic random tensors of one model.
struct Filler {
    rng: rand::rngs::StdRng,
}

impl Filler {
    fn values(&mut self, n: usize, center: f32, spread: f32) -> Vec<f32> {
        (0..n)
            .map(|_| center + self.rng.random_range(-spread..spread))
            .collect()
    }

    fn matrix(
        &mut self,
        rows: usize,
        cols: usize,
        scale: f32,
        dtype: GgmlDType,
    ) -> candle_core::Result<QTensor> {
        let data = self.values(rows * cols, 0.0, scale);
        QTensor::quantize(&Tensor::from_vec(data, (rows, cols), &Device::Cpu)?, dtype)
    }

    /// A norm weight or bias, stored as F32 as the converter does.
    fn vector(&mut self, n: usize, center: f32, spread: f32) -> candle_core::Result<QTensor> {
        vector(self.values(n, center, spread))
    }
}

fn vector(data: Vec<f32>) -> candle_core::Result<QTensor> {
    let n = data.len();
    QTensor::quantize(&Tensor::from_vec(data, n, &Device::Cpu)?, GgmlDType::F32)
}

impl TinyModel {
    /// The tiny model of `arch`: every matrix Q8_0 (what braid requantizes to loses nothing
    /// then, and llama.cpp multiplies Q8_0 by Q8_0 activations, as braid does), norms and
    /// biases F32 and random, so that leaving one out changes the output.
    pub fn arch(arch: Arch, seed: u64) -> candle_core::Result<Self> {
        let shape = match arch {
            Arch::Llama | Arch::Llama3 | Arch::Qwen2 => Shape {
                arch: arch.architecture().name(),
                hidden: HIDDEN,
                ffn: 128,
                heads: 4,
                kv_heads: 2,
                head_dim: 16,
                layers: 2,
            },
            Arch::Qwen3 => Shape {
                arch: "qwen3",
                hidden: HIDDEN,
                ffn: 128,
                heads: 4,
                kv_heads: 2,
                head_dim: 32,
                layers: 2,
            },
            Arch::Gemma3 => Shape {
                arch: "gemma3",
                hidden: HIDDEN,
                ffn: 128,
                heads: 4,
                kv_heads: 1,
                head_dim: 32,
                layers: 6,
            },
        };
        let rope_base = match arch {
            Arch::Llama | Arch::Llama3 => 500_000.0,
            _ => 1_000_000.0,
        };
        let mut fill = Filler {
            rng: rand::rngs::StdRng::seed_from_u64(seed),
        };
        let (h, d) = (shape.hidden, shape.head_dim);
        let (q_w, kv_w) = (shape.heads * d, shape.kv_heads * d);
        let q8 = GgmlDType::Q8_0;
        let vocab = braid_text::tiny_vocab::size();
        // Chosen so that llama.cpp's next-token distributions are peaked (a clear top-1 at
        // most steps) without collapsing onto one token: a tied output makes a large
        // embedding predict the current token again (gemma3 scales it by √hidden on top),
        // and a larger output norm sharpens the logits.
        let (embed_scale, out_norm) = match arch {
            Arch::Llama | Arch::Llama3 => (1.0, 1.0),
            Arch::Qwen2 => (0.3, 4.0),
            Arch::Qwen3 => (0.5, 3.0),
            Arch::Gemma3 => (0.15, 6.0),
        };
        let mut tensors = vec![
            (
                "token_embd.weight".to_string(),
                fill.matrix(vocab, h, embed_scale, q8)?,
            ),
            (
                "output_norm.weight".into(),
                fill.vector(h, out_norm, 0.5 * out_norm)?,
            ),
        ];
        if arch == Arch::Qwen3 {
            tensors.push(("output.weight".into(), fill.matrix(vocab, h, 1.0, q8)?));
        }
        if arch == Arch::Llama3 {
            tensors.push((
                "rope_freqs.weight".into(),
                vector(llama3_rope_factors(d, rope_base))?,
            ));
        }
        let flags = arch.architecture().flags();
        for i in 0..shape.layers {
            let p = |s: &str| format!("blk.{i}.{s}");
            tensors.push((p("attn_norm.weight"), fill.vector(h, 1.0, 0.5)?));
            tensors.push((p("attn_q.weight"), fill.matrix(q_w, h, 0.3, q8)?));
            tensors.push((p("attn_k.weight"), fill.matrix(kv_w, h, 0.3, q8)?));
            tensors.push((p("attn_v.weight"), fill.matrix(kv_w, h, 0.3, q8)?));
            tensors.push((p("attn_output.weight"), fill.matrix(h, q_w, 0.3, q8)?));
            if flags.qkv_bias {
                tensors.push((p("attn_q.bias"), fill.vector(q_w, 0.0, 1.0)?));
                tensors.push((p("attn_k.bias"), fill.vector(kv_w, 0.0, 1.0)?));
                tensors.push((p("attn_v.bias"), fill.vector(kv_w, 0.0, 1.0)?));
            }
            if flags.qk_norm {
                tensors.push((p("attn_q_norm.weight"), fill.vector(d, 1.0, 0.5)?));
                tensors.push((p("attn_k_norm.weight"), fill.vector(d, 1.0, 0.5)?));
            }
            if flags.post_norms {
                tensors.push((p("post_attention_norm.weight"), fill.vector(h, 1.0, 0.5)?));
                tensors.push((p("post_ffw_norm.weight"), fill.vector(h, 1.0, 0.5)?));
            }
            tensors.push((p("ffn_norm.weight"), fill.vector(h, 1.0, 0.5)?));
            tensors.push((p("ffn_gate.weight"), fill.matrix(shape.ffn, h, 0.3, q8)?));
            tensors.push((p("ffn_up.weight"), fill.matrix(shape.ffn, h, 0.3, q8)?));
            tensors.push((p("ffn_down.weight"), fill.matrix(h, shape.ffn, 0.3, q8)?));
        }

        let a = shape.arch;
        let mut metadata = shape_metadata(&shape, rope_base, arch.name());
        match arch {
            Arch::Llama | Arch::Llama3 => {
                metadata.push((format!("{a}.rope.dimension_count"), Value::U32(d as u32)));
                metadata.push((format!("{a}.vocab_size"), Value::U32(vocab as u32)));
            }
            Arch::Qwen2 => {}
            Arch::Qwen3 | Arch::Gemma3 => {
                metadata.push((format!("{a}.attention.key_length"), Value::U32(d as u32)));
                metadata.push((format!("{a}.attention.value_length"), Value::U32(d as u32)));
            }
        }
        if flags.sliding_window {
            metadata.push((
                format!("{a}.attention.sliding_window"),
                Value::U32(GEMMA3_SLIDING_WINDOW as u32),
            ));
        }
        Ok(Self { metadata, tensors })
    }

    /// A llama model 256 wide (the K-quants' block) whose matrices are stored in the type
    /// `dtype_of(tensor name)` gives, as mixed-type files store them; norms are F32.
    pub fn llama_typed(
        seed: u64,
        dtype_of: impl Fn(&str) -> GgmlDType,
    ) -> candle_core::Result<Self> {
        let shape = Shape {
            arch: "llama",
            hidden: 256,
            ffn: 256,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            layers: 2,
        };
        let mut fill = Filler {
            rng: rand::rngs::StdRng::seed_from_u64(seed),
        };
        let (h, f) = (shape.hidden, shape.ffn);
        let kv_w = shape.kv_heads * shape.head_dim;
        let vocab = braid_text::tiny_vocab::size();
        let matrix = |fill: &mut Filler, name: String, rows, cols, scale| {
            let dtype = dtype_of(&name);
            fill.matrix(rows, cols, scale, dtype).map(|t| (name, t))
        };
        let mut tensors = vec![
            matrix(&mut fill, "token_embd.weight".into(), vocab, h, 1.0)?,
            matrix(&mut fill, "output.weight".into(), vocab, h, 0.5)?,
            ("output_norm.weight".into(), fill.vector(h, 1.0, 0.5)?),
        ];
        for i in 0..shape.layers {
            let p = |s: &str| format!("blk.{i}.{s}.weight");
            tensors.push((p("attn_norm"), fill.vector(h, 1.0, 0.5)?));
            tensors.push(matrix(&mut fill, p("attn_q"), h, h, 0.15)?);
            tensors.push(matrix(&mut fill, p("attn_k"), kv_w, h, 0.15)?);
            tensors.push(matrix(&mut fill, p("attn_v"), kv_w, h, 0.15)?);
            tensors.push(matrix(&mut fill, p("attn_output"), h, h, 0.15)?);
            tensors.push((p("ffn_norm"), fill.vector(h, 1.0, 0.5)?));
            tensors.push(matrix(&mut fill, p("ffn_gate"), f, h, 0.15)?);
            tensors.push(matrix(&mut fill, p("ffn_up"), f, h, 0.15)?);
            tensors.push(matrix(&mut fill, p("ffn_down"), h, f, 0.15)?);
        }
        let mut metadata = shape_metadata(&shape, 10_000.0, "llama-typed");
        metadata.push((
            "llama.rope.dimension_count".into(),
            Value::U32(shape.head_dim as u32),
        ));
        Ok(Self { metadata, tensors })
    }

    /// The same model with every tensor dequantized to F32.
    pub fn dequantized(&self) -> candle_core::Result<Self> {
        let tensors = self
            .tensors
            .iter()
            .map(|(name, t)| {
                let f = t.dequantize(&Device::Cpu)?;
                Ok((name.clone(), QTensor::quantize(&f, GgmlDType::F32)?))
            })
            .collect::<candle_core::Result<_>>()?;
        Ok(Self {
            metadata: self.metadata.clone(),
            tensors,
        })
    }

    pub fn write(&self, path: &Path) -> candle_core::Result<()> {
        let md: Vec<(&str, &Value)> = self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let ts: Vec<(&str, &QTensor)> = self.tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut f = std::fs::File::create(path)?;
        gguf_file::write(&mut f, &md, &ts)
    }
}

/// Writes the tiny model of `arch` to `path`.
pub fn write_arch(path: &Path, arch: Arch, seed: u64) -> candle_core::Result<()> {
    TinyModel::arch(arch, seed)?.write(path)
}

/// The metadata every architecture has, under its own prefix, and the tokenizer of [`write`]
/// with `add_bos_token` off, so that llama.cpp evaluates a prompt of token ids as given.
fn shape_metadata(s: &Shape, rope_base: f32, name: &str) -> Vec<(String, Value)> {
    let a = s.arch;
    let u32 = |v: usize| Value::U32(v as u32);
    vec![
        ("general.architecture".into(), Value::String(a.into())),
        (
            "general.name".into(),
            Value::String(format!("tiny-random-{name}")),
        ),
        (format!("{a}.block_count"), u32(s.layers)),
        (format!("{a}.context_length"), u32(CONTEXT)),
        (format!("{a}.embedding_length"), u32(s.hidden)),
        (format!("{a}.feed_forward_length"), u32(s.ffn)),
        (format!("{a}.attention.head_count"), u32(s.heads)),
        (format!("{a}.attention.head_count_kv"), u32(s.kv_heads)),
        (format!("{a}.rope.freq_base"), Value::F32(rope_base)),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-6),
        ),
        ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
    ]
    .into_iter()
    .chain(braid_text::tiny_vocab::metadata())
    .collect()
}
