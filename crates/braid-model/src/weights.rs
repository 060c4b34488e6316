//! Reads a GGUF's tensors into the kernels' weight formats: Q4_0, Q4_1 and Q4_K linear layers
//! stay 4-bit, Q5_0, Q5_1 and Q5_K stay 5-bit, Q8_0 is copied into int8 blocks, and every other
//! type is requantized to int8 blocks (see `Reader::packed` for stacks that mix types).
//!
//! Q, K and V are stacked into one matrix, and gate and up into another, so that a layer costs
//! four kernel calls instead of seven: fewer passes to quantize activations and fewer
//! synchronisations of the two cores per step.

use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use braid_kernels::{
    Int4Source, Int4Weight, Int5Source, Int5Weight, Int8Source, Int8Weight, PackedWeight,
};
use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub qkv: PackedWeight,
    /// Q, K and V biases end to end, as wide as a row of `qkv`'s output (Qwen2).
    pub qkv_bias: Option<Vec<f32>>,
    /// RMSNorm weights applied to every query head and every key head (Qwen3, Gemma 3).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub attn_out: PackedWeight,
    /// Norm of attention's output before the residual add (Gemma 3).
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub gate_up: PackedWeight,
    pub down: PackedWeight,
    /// Norm of the MLP's output before the residual add (Gemma 3).
    pub post_ffn_norm: Option<Vec<f32>>,
}

pub struct Weights {
    pub embedding: PackedWeight,
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>,
    /// `output.weight`, or the embedding when the model ties them (SmolLM2 does).
    pub output: Option<PackedWeight>,
    /// Llama 3's rope frequency divisors (`rope_freqs.weight`), `head_dim / 2` of them.
    pub rope_factors: Option<Vec<f32>>,
}

impl Weights {
    pub fn output(&self) -> &PackedWeight {
        self.output.as_ref().unwrap_or(&self.embedding)
    }

    /// Every packed matrix: the embedding, the output if it is not tied, then each layer's.
    fn packed(&self) -> impl Iterator<Item = &PackedWeight> {
        std::iter::once(&self.embedding)
            .chain(self.output.as_ref())
            .chain(
                self.layers
                    .iter()
                    .flat_map(|l| [&l.qkv, &l.attn_out, &l.gate_up, &l.down]),
            )
    }

    pub fn size_in_bytes(&self) -> usize {
        self.packed().map(PackedWeight::size_in_bytes).sum()
    }

    /// Multiply-adds of the layers' matmuls per token (the output layer runs only for sampled
    /// rows, so a prompt token does not pay it).
    pub fn layer_multiply_adds(&self) -> usize {
        let layers = self.layers.iter();
        layers
            .flat_map(|l| [&l.qkv, &l.attn_out, &l.gate_up, &l.down])
            .map(|w| w.n() * w.k())
            .sum()
    }

    /// Bytes per weight format (`int4`, `int8`), for reports: which layers stayed 4-bit.
    pub fn bytes_by_format(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut by = std::collections::BTreeMap::new();
        for w in self.packed() {
            *by.entry(w.format()).or_default() += w.size_in_bytes();
        }
        by
    }
}

struct Reader<'a> {
    ct: &'a Content,
    file: BufReader<File>,
    path: &'a Path,
}

impl Reader<'_> {
    /// A tensor as stored, checked against the expected shape (rows, cols).
    fn tensor(&mut self, name: &str, rows: usize, cols: usize) -> Result<QTensor> {
        if !self.ct.tensor_infos.contains_key(name) {
            return Err(ModelError::Unsupported {
                path: self.path.to_path_buf(),
                reason: format!("tensor `{name}` is missing"),
            });
        }
        let qt = self
            .ct
            .tensor(&mut self.file, name, &Device::Cpu)
            .map_err(|e| self.corrupt(name, e))?;
        let dims = qt.shape().dims().to_vec();
        let expected: &[usize] = if rows == 1 { &[cols] } else { &[rows, cols] };
        if dims != expected {
            return Err(ModelError::Unsupported {
                path: self.path.to_path_buf(),
                reason: format!("tensor `{name}` has shape {dims:?}, expected {expected:?}"),
            });
        }
        Ok(qt)
    }

    fn corrupt(&self, name: &str, e: candle_core::Error) -> ModelError {
        ModelError::Corrupt {
            path: self.path.to_path_buf(),
            reason: format!("tensor `{name}`: {}", crate::error::candle_message(e)),
        }
    }

    /// A tensor as row-major f32, checked against the expected shape (rows, cols).
    fn f32(&mut self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        self.tensor(name, rows, cols)?
            .dequantize(&Device::Cpu)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| self.corrupt(name, e))
    }

    /// The file's blocks of the tensors `names` (each `(name, rows)`, all `cols` wide), end to
    /// end.
    fn stacked_blocks(&mut self, names: &[(&str, usize)], cols: usize) -> Result<Vec<u8>> {
        let mut raw = Vec::new();
        for &(name, n) in names {
            let qt = self.tensor(name, n, cols)?;
            raw.extend_from_slice(&qt.data().map_err(|e| self.corrupt(name, e))?);
        }
        Ok(raw)
    }

    /// The tensors `names` (each `(name, rows)`, all `cols` wide) stacked into one matrix: in
    /// the 4-bit format if they are all Q4_0, all Q4_1 or all Q4_K; in the 5-bit format if they
    /// are all Q5_0, all Q5_1 or all Q5_K; copied into int8 if each is Q8_0 or Q5_0 (a Q4_K_M
    /// file's Q, K and V may mix them); requantized to int8 otherwise.
    fn packed(&mut self, names: &[(&str, usize)], cols: usize) -> Result<PackedWeight> {
        #[derive(Clone, Copy, PartialEq)]
        enum Nibbles {
            Int4(Int4Source),
            Int5(Int5Source),
        }
        let nibbles = |dtype| match dtype {
            GgmlDType::Q4_0 => Some(Nibbles::Int4(Int4Source::Q4_0)),
            GgmlDType::Q4_1 => Some(Nibbles::Int4(Int4Source::Q4_1)),
            GgmlDType::Q4K if cols.is_multiple_of(256) => Some(Nibbles::Int4(Int4Source::Q4K)),
            GgmlDType::Q5_0 => Some(Nibbles::Int5(Int5Source::Q5_0)),
            GgmlDType::Q5_1 => Some(Nibbles::Int5(Int5Source::Q5_1)),
            GgmlDType::Q5K if cols.is_multiple_of(256) => Some(Nibbles::Int5(Int5Source::Q5K)),
            _ => None,
        };
        let int8 = |dtype| match dtype {
            GgmlDType::Q8_0 => Some(Int8Source::Q8_0),
            GgmlDType::Q5_0 => Some(Int8Source::Q5_0),
            _ => None,
        };
        let dtypes: Vec<_> = names
            .iter()
            .map(|(name, _)| self.ct.tensor_infos.get(*name).map(|i| i.ggml_dtype))
            .collect();
        let rows = names.iter().map(|&(_, n)| n).sum();
        let formats: Vec<_> = dtypes.iter().map(|d| d.and_then(nibbles)).collect();
        let same_nibbles = formats[0].filter(|_| formats.windows(2).all(|p| p[0] == p[1]));
        let int8_parts: Option<Vec<_>> = dtypes
            .iter()
            .zip(names)
            .map(|(d, &(_, n))| Some((d.and_then(int8)?, n)))
            .collect();
        if let Some(format) = same_nibbles {
            let raw = self.stacked_blocks(names, cols)?;
            return Ok(match format {
                Nibbles::Int4(s) => PackedWeight::Int4(Int4Weight::from_gguf(s, &raw, rows, cols)),
                Nibbles::Int5(s) => PackedWeight::Int5(Int5Weight::from_gguf(s, &raw, rows, cols)),
            });
        }
        if let Some(parts) = int8_parts {
            let raw = self.stacked_blocks(names, cols)?;
            return Ok(PackedWeight::Int8(Int8Weight::from_gguf(
                &parts, &raw, cols,
            )));
        }
        let mut data = Vec::new();
        for &(name, n) in names {
            data.extend(self.f32(name, n, cols)?);
        }
        Ok(PackedWeight::from_f32(&data, rows, cols))
    }
}

pub fn load(ct: &Content, path: &Path, cfg: &ModelConfig) -> Result<Weights> {
    let file = File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut r = Reader {
        ct,
        file: BufReader::new(file),
        path,
    };
    let (h, f, d) = (cfg.hidden, cfg.ffn, cfg.head_dim);
    let (q, kv) = (cfg.q_width(), cfg.kv_width());
    let embedding = r.packed(&[("token_embd.weight", cfg.vocab_size)], h)?;
    let output_norm = r.f32("output_norm.weight", 1, h)?;
    let output = if ct.tensor_infos.contains_key("output.weight") {
        Some(r.packed(&[("output.weight", cfg.vocab_size)], h)?)
    } else {
        None
    };
    let rope_factors = if ct.tensor_infos.contains_key("rope_freqs.weight") {
        Some(r.f32("rope_freqs.weight", 1, d / 2)?)
    } else {
        None
    };
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for i in 0..cfg.num_layers {
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        let b = |s: &str| format!("blk.{i}.{s}.bias");
        let mut norm = |name: &str, n: usize, wanted: bool| -> Result<Option<Vec<f32>>> {
            wanted.then(|| r.f32(&p(name), 1, n)).transpose()
        };
        let (q_norm, k_norm) = (
            norm("attn_q_norm", d, cfg.has_qk_norm())?,
            norm("attn_k_norm", d, cfg.has_qk_norm())?,
        );
        let (post_attn_norm, post_ffn_norm) = (
            norm("post_attention_norm", h, cfg.has_post_norms())?,
            norm("post_ffw_norm", h, cfg.has_post_norms())?,
        );
        let qkv_bias = if cfg.has_qkv_bias() {
            let mut bias = r.f32(&b("attn_q"), 1, q)?;
            bias.extend(r.f32(&b("attn_k"), 1, kv)?);
            bias.extend(r.f32(&b("attn_v"), 1, kv)?);
            Some(bias)
        } else {
            None
        };
        layers.push(LayerWeights {
            attn_norm: r.f32(&p("attn_norm"), 1, h)?,
            qkv: r.packed(
                &[(&p("attn_q"), q), (&p("attn_k"), kv), (&p("attn_v"), kv)],
                h,
            )?,
            qkv_bias,
            q_norm,
            k_norm,
            attn_out: r.packed(&[(&p("attn_output"), h)], q)?,
            post_attn_norm,
            ffn_norm: r.f32(&p("ffn_norm"), 1, h)?,
            gate_up: r.packed(&[(&p("ffn_gate"), f), (&p("ffn_up"), f)], h)?,
            down: r.packed(&[(&p("ffn_down"), h)], f)?,
            post_ffn_norm,
        });
    }
    Ok(Weights {
        embedding,
        layers,
        output_norm,
        output,
        rope_factors,
    })
}
