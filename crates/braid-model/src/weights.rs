//! Reads a GGUF's tensors and requantizes every linear layer into the int8 kernel's format.
//!
//! Q, K and V are stacked into one matrix, and gate and up into another, so that a layer costs
//! four kernel calls instead of seven: fewer passes to quantize activations and fewer
//! synchronisations of the two cores per step.

use crate::config::ModelConfig;
use crate::error::{ModelError, Result};
use crate::kernels::PackedWeight;
use candle_core::quantized::gguf_file::Content;
use candle_core::Device;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub qkv: PackedWeight,
    pub attn_out: PackedWeight,
    pub ffn_norm: Vec<f32>,
    pub gate_up: PackedWeight,
    pub down: PackedWeight,
}

pub struct Weights {
    pub embedding: PackedWeight,
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>,
    /// `output.weight`, or the embedding when the model ties them (SmolLM2 does).
    pub output: Option<PackedWeight>,
}

impl Weights {
    pub fn output(&self) -> &PackedWeight {
        self.output.as_ref().unwrap_or(&self.embedding)
    }

    pub fn size_in_bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.qkv.size_in_bytes()
                    + l.attn_out.size_in_bytes()
                    + l.gate_up.size_in_bytes()
                    + l.down.size_in_bytes()
            })
            .sum();
        layers
            + self.embedding.size_in_bytes()
            + self.output.as_ref().map_or(0, |o| o.size_in_bytes())
    }
}

struct Reader<'a> {
    ct: &'a Content,
    file: BufReader<File>,
    path: &'a Path,
}

impl Reader<'_> {
    /// A tensor as row-major f32 with its (rows, cols), checked against the expected shape.
    fn f32(&mut self, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
        let bad = |reason: String| ModelError::Corrupt {
            path: self.path.to_path_buf(),
            reason,
        };
        if !self.ct.tensor_infos.contains_key(name) {
            return Err(ModelError::Unsupported {
                path: self.path.to_path_buf(),
                reason: format!("tensor `{name}` is missing"),
            });
        }
        let qt = self
            .ct
            .tensor(&mut self.file, name, &Device::Cpu)
            .map_err(|e| {
                bad(format!(
                    "tensor `{name}`: {}",
                    crate::error::candle_message(e)
                ))
            })?;
        let dims = qt.shape().dims().to_vec();
        let expected: &[usize] = if rows == 1 { &[cols] } else { &[rows, cols] };
        if dims != expected {
            return Err(ModelError::Unsupported {
                path: self.path.to_path_buf(),
                reason: format!("tensor `{name}` has shape {dims:?}, expected {expected:?}"),
            });
        }
        qt.dequantize(&Device::Cpu)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(|e| {
                bad(format!(
                    "tensor `{name}`: {}",
                    crate::error::candle_message(e)
                ))
            })
    }

    fn packed(&mut self, names: &[(&str, usize)], cols: usize) -> Result<PackedWeight> {
        let mut data = Vec::new();
        let mut rows = 0;
        for &(name, n) in names {
            data.extend(self.f32(name, n, cols)?);
            rows += n;
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
    let (h, f) = (cfg.hidden, cfg.ffn);
    let kv = cfg.num_kv_heads * cfg.head_dim;
    let embedding = r.packed(&[("token_embd.weight", cfg.vocab_size)], h)?;
    let output_norm = r.f32("output_norm.weight", 1, h)?;
    let output = if ct.tensor_infos.contains_key("output.weight") {
        Some(r.packed(&[("output.weight", cfg.vocab_size)], h)?)
    } else {
        None
    };
    let mut layers = Vec::with_capacity(cfg.num_layers);
    for i in 0..cfg.num_layers {
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        layers.push(LayerWeights {
            attn_norm: r.f32(&p("attn_norm"), 1, h)?,
            qkv: r.packed(
                &[(&p("attn_q"), h), (&p("attn_k"), kv), (&p("attn_v"), kv)],
                h,
            )?,
            attn_out: r.packed(&[(&p("attn_output"), h)], h)?,
            ffn_norm: r.f32(&p("ffn_norm"), 1, h)?,
            gate_up: r.packed(&[(&p("ffn_gate"), f), (&p("ffn_up"), f)], h)?,
            down: r.packed(&[(&p("ffn_down"), h)], f)?,
        });
    }
    Ok(Weights {
        embedding,
        layers,
        output_norm,
        output,
    })
}
