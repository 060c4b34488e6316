//! Writes a tiny architecture GGUF altered so that llama.cpp, running it, computes what a
//! wrong forward would compute on the original file: how far such a bug lands from the
//! reference is then measured by `scripts/tiny-arch-references.py --compare ARCH FILE`, which
//! is how the architecture tests' tolerance was chosen.
//!
//! `cargo run --release -p braid-model --example tiny-arch-variants -- ARCH VARIANT PATH SEED`
//!
//! Variants: `f32` (the exact weights: llama.cpp's own rounding noise), `nobias`, `otherrope`
//! (q and k rows permuted within each head, so that llama.cpp's rope pairs what the other style
//! would), `nofreqs` (rope factors of 1), `noqknormweight`, `plusone` (Gemma's +1 added to the
//! norm weights again), `nowindow`, `window7`, `window9`, `globalbase` (the global rope base on
//! windowed layers), `noembedscale` (the embedding not scaled by √hidden).

use braid_model::tiny_gguf::{Arch, TinyModel};
use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use std::path::Path;

/// Replaces the tensors whose name `pick` accepts by `f(values, dims)`, in their own type.
fn map(
    m: &mut TinyModel,
    pick: impl Fn(&str) -> bool,
    f: impl Fn(Vec<f32>, &[usize]) -> Vec<f32>,
) -> candle_core::Result<()> {
    for (name, t) in m.tensors.iter_mut() {
        if pick(name) {
            let values = t.dequantize(&Device::Cpu)?;
            let dims = values.dims().to_vec();
            let new = f(values.flatten_all()?.to_vec1()?, &dims);
            *t = QTensor::quantize(&Tensor::from_vec(new, dims, &Device::Cpu)?, t.dtype())?;
        }
    }
    Ok(())
}

/// Rows (or elements) permuted within each head of `d`. NEOX rope on `P·q`, with
/// `(P·q)[j] = q[2j]` and `(P·q)[j + d/2] = q[2j + 1]`, is `P` applied to the adjacent-pairs
/// rope of `q`; the same `P` on q and k keeps their dot products. `to_neox` applies `P`,
/// otherwise its inverse.
fn permute(data: Vec<f32>, dims: &[usize], d: usize, to_neox: bool) -> Vec<f32> {
    let cols = dims.get(1).copied().unwrap_or(1);
    let mut out = data.clone();
    for r in 0..dims[0] {
        let (head, j) = (r / d, r % d);
        let src = match (to_neox, j < d / 2) {
            (true, true) => 2 * j,
            (true, false) => 2 * (j - d / 2) + 1,
            (false, _) if j % 2 == 0 => j / 2,
            (false, _) => j / 2 + d / 2,
        };
        let s = head * d + src;
        out[r * cols..(r + 1) * cols].copy_from_slice(&data[s * cols..(s + 1) * cols]);
    }
    out
}

fn set(m: &mut TinyModel, suffix: &str, value: Value) {
    m.metadata.retain(|(k, _)| !k.ends_with(suffix));
    let key = format!("{}.{suffix}", m.metadata[0].1.to_string().unwrap());
    m.metadata.push((key, value));
}

fn variant(arch: Arch, name: &str, seed: u64) -> candle_core::Result<TinyModel> {
    let mut m = TinyModel::arch(arch, seed)?;
    let d = match arch {
        Arch::Llama | Arch::Llama3 | Arch::Qwen2 => 16,
        Arch::Qwen3 | Arch::Gemma3 => 32,
    };
    let qk = |n: &str| n.contains("attn_q") || n.contains("attn_k");
    match name {
        "f32" => m = m.dequantized()?,
        "nobias" => map(&mut m, |n| n.ends_with(".bias"), |v, _| vec![0.0; v.len()])?,
        "otherrope" => {
            let to_neox = !matches!(arch, Arch::Llama | Arch::Llama3);
            map(&mut m, qk, |v, dims| permute(v, dims, d, to_neox))?
        }
        "nofreqs" => map(
            &mut m,
            |n| n == "rope_freqs.weight",
            |v, _| vec![1.0; v.len()],
        )?,
        "noqknormweight" => map(
            &mut m,
            |n| qk(n) && n.contains("_norm."),
            |v, _| vec![1.0; v.len()],
        )?,
        "plusone" => map(
            &mut m,
            |n| n.contains("norm"),
            |v, _| v.into_iter().map(|x| x + 1.0).collect(),
        )?,
        "nowindow" => set(&mut m, "attention.sliding_window", Value::U32(512)),
        "window7" => set(&mut m, "attention.sliding_window", Value::U32(7)),
        "window9" => set(&mut m, "attention.sliding_window", Value::U32(9)),
        "globalbase" => set(&mut m, "rope.freq_base_swa", Value::F32(1_000_000.0)),
        "noembedscale" => {
            let (_, embedding) = m
                .tensors
                .iter()
                .find(|(n, _)| n == "token_embd.weight")
                .expect("an embedding");
            let output = QTensor::quantize(&embedding.dequantize(&Device::Cpu)?, GgmlDType::Q8_0)?;
            m.tensors.push(("output.weight".into(), output));
            let scale = (m.tensors[0].1.shape().dims()[1] as f32).sqrt();
            map(
                &mut m,
                |n| n == "token_embd.weight",
                |v, _| v.into_iter().map(|x| x / scale).collect(),
            )?
        }
        other => candle_core::bail!("unknown variant {other}"),
    }
    Ok(m)
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: tiny-arch-variants ARCH VARIANT PATH SEED";
    let [arch, name, path, seed] = args.as_slice() else {
        return Err(usage.into());
    };
    let arch = Arch::from_name(arch).ok_or(usage)?;
    let seed = seed.parse().map_err(|_| usage)?;
    variant(arch, name, seed)
        .and_then(|m| m.write(Path::new(path)))
        .map_err(|e| e.to_string())
}
