//! `cargo bench -p braid-kernels --bench matmul [-- ROWS]`: a prompt slice's matrix products on
//! every kernel this CPU runs, at SmolLM2-135M's shapes (Q4_1 weights, as the default model
//! stores them, and int8), with each kernel's share of its own int8 multiply-add peak.
//!
//! `braid bench-engine` times whole forwards, where attention, the norms and the activations'
//! quantization share the time; this isolates the part that is meant to run at the peak, so a
//! change to a kernel's inner loop can be judged by itself. Kernels alternate, and the median
//! of the rounds is reported.

use braid_kernels::{
    int8_peak::int8_peak_gops, matmul_with, Int4Source, Int4Weight, Kernel, PackedWeight,
    QuantizedRows,
};
use std::time::Instant;

/// (outputs, inputs) of one layer's products: q, k and v, the output projection, gate and up,
/// down.
const SHAPES: [(usize, usize); 6] = [
    (576, 576),
    (192, 576),
    (192, 576),
    (576, 576),
    (1536, 576),
    (576, 1536),
];
const ROUNDS: usize = 7;

/// A Q4_1 tensor of `n × k` with varied scales, minimums and nibbles.
fn q4_1(n: usize, k: usize) -> Vec<u8> {
    let mut raw = Vec::with_capacity(n * k / 32 * 20);
    for b in 0..n * k / 32 {
        let d = half::f16::from_f32(0.01 + (b % 13) as f32 * 1e-3);
        let m = half::f16::from_f32(-0.05 - (b % 7) as f32 * 1e-3);
        raw.extend_from_slice(&d.to_le_bytes());
        raw.extend_from_slice(&m.to_le_bytes());
        raw.extend((0..16).map(|i| ((b * 31 + i * 17) % 256) as u8));
    }
    raw
}

fn main() {
    let rows: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(|a| a.parse().expect("ROWS must be a number"))
        .unwrap_or(512);
    let kernels: Vec<Kernel> = Kernel::supported()
        .into_iter()
        .filter(|k| *k != Kernel::Portable)
        .collect();
    println!(
        "{rows} rows, {} threads, median of {ROUNDS} alternating rounds",
        rayon::current_num_threads()
    );
    let peaks: Vec<Option<f64>> = kernels
        .iter()
        .map(|k| int8_peak_gops(*k, 20_000_000))
        .collect();
    for (format, weights) in [
        (
            "q4_1",
            SHAPES
                .iter()
                .map(|&(n, k)| {
                    PackedWeight::Int4(Int4Weight::from_gguf(Int4Source::Q4_1, &q4_1(n, k), n, k))
                })
                .collect::<Vec<_>>(),
        ),
        (
            "int8",
            SHAPES
                .iter()
                .map(|&(n, k)| {
                    let w: Vec<f32> = (0..n * k)
                        .map(|i| ((i * 104_729) % 997) as f32 / 498.0 - 1.0)
                        .collect();
                    PackedWeight::from_f32(&w, n, k)
                })
                .collect(),
        ),
    ] {
        let inputs: Vec<QuantizedRows> = [576, 1536]
            .iter()
            .map(|&k| {
                let x: Vec<f32> = (0..rows * k)
                    .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
                    .collect();
                let mut q = QuantizedRows::default();
                q.quantize(&x, rows, k);
                q
            })
            .collect();
        let mut out = vec![0f32; rows * 1536];
        let ops: f64 = SHAPES
            .iter()
            .map(|&(n, k)| 2.0 * (rows * n * k) as f64)
            .sum();
        let mut times = vec![Vec::new(); kernels.len()];
        for _ in 0..ROUNDS {
            for (kernel, times) in kernels.iter().zip(&mut times) {
                let t = Instant::now();
                for w in &weights {
                    let x = inputs.iter().find(|x| x.k() == w.k()).expect("an input");
                    matmul_with(*kernel, x, w, &mut out);
                }
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        for ((kernel, times), peak) in kernels.iter().zip(&mut times).zip(&peaks) {
            times.sort_by(f64::total_cmp);
            let ms = times[ROUNDS / 2];
            let gops = ops / (ms / 1e3) / 1e9;
            let share = peak
                .map(|p| format!(", {:.0}% of its {p:.0} GOP/s peak", 100.0 * gops / p))
                .unwrap_or_default();
            println!("{format} {kernel:>10}: one layer {ms:6.2} ms, {gops:4.0} GOP/s{share}");
        }
    }
}
