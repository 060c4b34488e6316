//! Why braid has its own matmul kernel, measured: the linear layers of one forward (the seven
//! weights of every layer) at several row counts, through each path candle offers and through
//! braid's int8 kernel, in one run on the same machine. Every layer's own weights are used, not
//! one layer's repeated: a single decode row is bound by reading the weights from memory, and
//! one layer's weights would stay in cache and flatter every path.

use crate::error::{candle_message, ModelError, Result};
use braid_kernels::{matmul, PackedWeight, QuantizedRows};
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
    for name in (0..layers).flat_map(|l| NAMES.map(|n| format!("blk.{l}.{n}.weight"))) {
        let qt = ct
            .tensor(&mut file, &name, &dev)
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
        // One input per width: the weights have only two (hidden and feed-forward).
        let mut inputs = std::collections::BTreeMap::new();
        for w in &packed {
            if let std::collections::btree_map::Entry::Vacant(e) = inputs.entry(w.k()) {
                let x = Tensor::rand(-1f32, 1f32, (m, w.k()), &dev).map_err(|e| err(path, e))?;
                let flat: Vec<f32> = x
                    .flatten_all()
                    .and_then(|t| t.to_vec1())
                    .map_err(|e| err(path, e))?;
                e.insert((x, flat));
            }
        }
        let per_sec = |secs: f64| m as f64 / secs;
        // On a compute thread, as the engine runs its forward.
        let on_pool = |f: &mut (dyn FnMut() + Send)| rayon::join(|| time(f), || ()).0;
        let candle = |mms: &[QMatMul]| {
            on_pool(&mut || {
                for (mm, w) in mms.iter().zip(&packed) {
                    mm.forward(&inputs[&w.k()].0).expect("candle matmul");
                }
            })
        };
        let (a, b, c) = (candle(&shipped), candle(&q8), candle(&f32s));
        let mut q = QuantizedRows::default();
        let mut y = Vec::new();
        let d = on_pool(&mut || {
            for w in &packed {
                q.quantize(&inputs[&w.k()].1, m, w.k());
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
