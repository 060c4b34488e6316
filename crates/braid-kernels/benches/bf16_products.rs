//! `cargo bench -p braid-kernels --bench bf16_products`: the sentence model's bf16 matrix
//! products on each path this CPU runs (`vdpbf16ps`, and the same arithmetic as f32 FMAs),
//! at all-MiniLM-L6-v2's shapes for a batch of 2,048 token rows. Both paths give the same bits,
//! so which is faster is the only question, and the answer depends on the CPU: on Zen 4 the
//! instruction doubled the encoder's rate; an Intel Xeon of family 6 model 207 runs
//! `vdpbf16ps` at a quarter of its FMAs' instruction rate, and there the two paths tie.

use braid_kernels::bf16::{matmul_bf16_with, Bf16Path, Bf16Rows, Bf16Weight};
use std::time::Instant;

/// (outputs, inputs) of the encoder's products: attention projections, the feed-forward's two.
const SHAPES: [(usize, usize); 3] = [(384, 384), (1536, 384), (384, 1536)];
const ROWS: usize = 2048;
const ROUNDS: usize = 5;

fn main() {
    let kernel = braid_kernels::select_from_env().unwrap_or_else(|e| panic!("{e}"));
    let mut paths = vec![Bf16Path::Fma(kernel)];
    let preferred = Bf16Path::for_kernel(kernel);
    if preferred != paths[0] {
        paths.insert(0, preferred);
    }
    println!(
        "kernel {kernel}, {} threads, {ROWS} rows, median of {ROUNDS} alternating rounds",
        rayon::current_num_threads()
    );
    for (n, k) in SHAPES {
        let x: Vec<f32> = (0..ROWS * k)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 104_729) % 997) as f32 / 498.0 - 1.0)
            .collect();
        let mut rows = Bf16Rows::default();
        rows.round(&x, ROWS, k);
        let weight = Bf16Weight::from_f32(&w, n, k);
        let mut out = vec![0f32; ROWS * n];
        let mut times = vec![Vec::new(); paths.len()];
        for _ in 0..ROUNDS {
            for (path, times) in paths.iter().zip(&mut times) {
                let t = Instant::now();
                matmul_bf16_with(*path, &rows, &weight, &mut out);
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        let line: Vec<String> = paths
            .iter()
            .zip(&mut times)
            .map(|(path, times)| {
                times.sort_by(f64::total_cmp);
                let ms = times[ROUNDS / 2];
                let gflops = 2.0 * (ROWS * n * k) as f64 / (ms / 1e3) / 1e9;
                format!("{}: {ms:.2} ms ({gflops:.0} GFLOP/s)", path.name())
            })
            .collect();
        println!("{n:>5} × {k:<5} {}", line.join("   "));
    }
}
