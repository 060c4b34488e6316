//! Why braid has its own matmul kernel, measured: the linear layers of one forward (the seven
//! weights of a layer, times the number of layers) at several row counts, through each path
//! candle offers and through braid's int8 kernel, in one run on the same machine.

use crate::error::{candle_message, ModelError, Result};
use crate::int8_matmul::{matmul, PackedWeight, QuantizedRows};
use candle_core::quantized::{gguf_file::Content, GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use std::path::Path;
use std::time::Instant;

#[derive(Debug, serde::Serialize)]
pub struct KernelRow {
    pub rows: usize,
    /// Tokens per second for all layers' linear weights, by path.
    pub candle_as_shipped: f64,
    pub candle_q8_0: f64,
    pub candle_f32: f64,
    pub braid_int8: f64,
}

const NAMES: [&str; 7] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

fn err(path: &Path, e: candle_core::Error) -> ModelError {
    ModelError::Corrupt {
        path: path.to_path_buf(),
        reason: candle_message(e),
    }
}

/// Times layer 0's weights and scales to `layers` layers (every layer has the same shapes).
pub fn run(path: &Path, layers: usize, row_counts: &[usize]) -> Result<Vec<KernelRow>> {
    let mut file = std::fs::File::open(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let ct = Content::read(&mut file).map_err(|e| err(path, e))?;
    let dev = Device::Cpu;
    let mut shipped = Vec::new();
    let mut q8 = Vec::new();
    let mut f32s = Vec::new();
    let mut packed = Vec::new();
    for name in NAMES {
        let qt = ct
            .tensor(&mut file, &format!("blk.0.{name}.weight"), &dev)
            .map_err(|e| err(path, e))?;
        let dense = qt.dequantize(&dev).map_err(|e| err(path, e))?;
        let (n, k) = dense.dims2().map_err(|e| err(path, e))?;
        let data: Vec<f32> = dense
            .flatten_all()
            .and_then(|t| t.to_vec1())
            .map_err(|e| err(path, e))?;
        packed.push(PackedWeight::from_f32(&data, n, k));
        q8.push(
            QMatMul::from_qtensor(
                QTensor::quantize(&dense, GgmlDType::Q8_0).map_err(|e| err(path, e))?,
            )
            .map_err(|e| err(path, e))?,
        );
        shipped.push(QMatMul::from_qtensor(qt).map_err(|e| err(path, e))?);
        f32s.push(QMatMul::Tensor(dense));
    }
    let time = |f: &mut dyn FnMut()| {
        f();
        let reps = 5;
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        t.elapsed().as_secs_f64() / reps as f64
    };
    let mut out = Vec::new();
    for &m in row_counts {
        let inputs: Vec<Tensor> = packed
            .iter()
            .map(|w| Tensor::rand(-1f32, 1f32, (m, w.k()), &dev))
            .collect::<candle_core::Result<_>>()
            .map_err(|e| err(path, e))?;
        let per_sec = |secs: f64| m as f64 / (secs * layers as f64);
        let candle = |mms: &[QMatMul]| {
            time(&mut || {
                for (mm, x) in mms.iter().zip(&inputs) {
                    mm.forward(x).expect("candle matmul");
                }
            })
        };
        let (a, b, c) = (candle(&shipped), candle(&q8), candle(&f32s));
        let xs: Vec<Vec<f32>> = inputs
            .iter()
            .map(|x| x.flatten_all().and_then(|t| t.to_vec1()).expect("input"))
            .collect();
        let mut q = QuantizedRows::default();
        let mut y = Vec::new();
        let d = time(&mut || {
            for (w, x) in packed.iter().zip(&xs) {
                q.quantize(x, m, w.k());
                y.resize(m * w.n(), 0.0);
                matmul(&q, w, &mut y);
            }
        });
        out.push(KernelRow {
            rows: m,
            candle_as_shipped: per_sec(a),
            candle_q8_0: per_sec(b),
            candle_f32: per_sec(c),
            braid_int8: per_sec(d),
        });
    }
    Ok(out)
}
