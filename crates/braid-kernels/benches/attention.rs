//! `cargo bench -p braid-kernels --bench attention`: a prompt's attention alone, one layer of
//! the default model's shape (9 query heads over 3 KV heads of 64), for prompts of 512 to
//! 8,192 tokens read in one forward, in the tasks the model runs (64 rows × one KV head) on
//! every thread. Prints the rate as floating-point operations per second (a causal prompt of
//! `n` rows does `n(n+1)/2` query-key pairs, each `4 · head_dim` operations: the scores and the
//! weighted values) beside this CPU's f32 multiply-add peak, measured by the same run.
//! With `--decode`, the lengths are contexts, and it times one layer of a lone decoding row
//! (`--grouped`: in tasks of a KV head's three query heads, as a batch has them). `--q8_0`
//! stores the cache as `--kv-cache-dtype q8_0` does. A prompt's rows are computed in bf16, as
//! the model computes them; `--f32` computes them in f32, as generated rows are.

use braid_kernels::attention::{attend_group, parts_for, GroupTask, Scratch, ROW_TILE};
use braid_kernels::{Kernel, KvDtype, KvPool, KvShape, SendPtr};
use rayon::prelude::*;
use std::time::Instant;

const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const D: usize = 64;
const BLOCK: usize = 16;

fn main() {
    let kernel = braid_kernels::select_from_env().unwrap_or_else(|e| panic!("{e}"));
    let lengths: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let lengths = if lengths.is_empty() {
        vec![512, 2048, 4096, 8192]
    } else {
        lengths
    };
    let decode = std::env::args().any(|a| a == "--decode");
    let grouped = std::env::args().any(|a| a == "--grouped");
    let bf16 = !std::env::args().any(|a| a == "--f32");
    let dtype = if std::env::args().any(|a| a == "--q8_0") {
        KvDtype::Q8_0
    } else {
        KvDtype::F16
    };
    let threads = rayon::current_num_threads();
    let peak = f32_peak_gflops();
    println!(
        "kernel {kernel}, {threads} threads, f32 multiply-add peak {peak:.0} GFLOP/s (all threads)"
    );
    if !decode {
        println!("prompt rows in {}", if bf16 { "bf16" } else { "f32" });
    }
    println!(
        "{:>7} {:>10} {:>9} {:>8}",
        "prompt", "ms/layer", "GFLOP/s", "of peak"
    );
    if decode {
        println!("{:>7} {:>10}", "context", "µs/layer");
        for n in lengths {
            println!("{n:>7} {:>10.2}", decode_us(kernel, n, grouped, dtype));
        }
        return;
    }
    for n in lengths {
        let ms = layer_ms(kernel, n, dtype, bf16);
        let pairs = (n * (n + 1) / 2) as f64;
        let gflops = pairs * (4 * D * HEADS) as f64 / (ms / 1e3) / 1e9;
        println!(
            "{n:>7} {ms:>10.2} {gflops:>9.1} {:>7.0}%",
            100.0 * gflops / peak
        );
    }
}

/// A one-layer pool holding `n` positions of random keys and values, its block table, and
/// random queries for every position.
fn filled_pool(n: usize, dtype: KvDtype) -> (KvPool, Vec<u32>, Vec<f32>) {
    let shape = KvShape {
        num_layers: 1,
        num_kv_heads: KV_HEADS,
        head_dim: D,
    };
    let blocks = n.div_ceil(BLOCK);
    let mut pool = KvPool::with_dtype(shape, BLOCK, blocks, dtype);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut x = 0x2545_f491_u32;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        (x as f32 / u32::MAX as f32) * 2.0 - 1.0
    };
    for pos in 0..n {
        let k: Vec<f32> = (0..KV_HEADS * D).map(|_| next()).collect();
        let v: Vec<f32> = (0..KV_HEADS * D).map(|_| next()).collect();
        pool.write(0, &table, pos, &k, &v);
    }
    let q: Vec<f32> = (0..n * HEADS * D).map(|_| next()).collect();
    (pool, table, q)
}

/// Median microseconds of one layer's attention for a lone sequence decoding its row at
/// position `n - 1`, in the tasks the model gives it at a short context: one per query head,
/// or with `grouped` one per KV head (as a batch of sequences has them).
fn decode_us(kernel: Kernel, n: usize, grouped: bool, dtype: KvDtype) -> f64 {
    let (pool, table, q) = filled_pool(n, dtype);
    let mut out = vec![0f32; HEADS * D];
    let g = HEADS / KV_HEADS;
    let group = if grouped { g } else { 1 };
    let tasks: Vec<GroupTask> = (0..HEADS / group)
        .map(|t| GroupTask {
            layer: 0,
            block_table: &table,
            start: n - 1,
            rows: 1,
            kv_head: t * group / g,
            first_head: t * group,
            group,
            parts: 0..parts_for(n - 1, BLOCK),
            split: false,
            window: None,
            bf16: false,
        })
        .collect();
    let out_ptr = SendPtr::new(out.as_mut_ptr());
    let mut times = Vec::new();
    for _ in 0..2000 {
        let t = Instant::now();
        tasks.par_iter().for_each_init(Scratch::default, |s, task| {
            // SAFETY: each task is one head of the one row; its query and output are `D`
            // floats inside `q` and `out`, which outlive the loop.
            unsafe {
                attend_group(
                    kernel,
                    &pool,
                    task,
                    D,
                    s,
                    |_, h| q.as_ptr().add(((n - 1) * HEADS + h) * D),
                    |_, h| out_ptr.get().add(h * D),
                )
            }
        });
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    std::hint::black_box(&out);
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Median milliseconds of one layer's attention over an `n`-token prompt.
fn layer_ms(kernel: Kernel, n: usize, dtype: KvDtype, bf16: bool) -> f64 {
    let (pool, table, q) = filled_pool(n, dtype);
    let mut out = vec![0f32; n * HEADS * D];
    let g = HEADS / KV_HEADS;
    let mut tasks = Vec::new();
    for start in (0..n).step_by(ROW_TILE) {
        let rows = ROW_TILE.min(n - start);
        for kv_head in 0..KV_HEADS {
            tasks.push(GroupTask {
                layer: 0,
                block_table: &table,
                start,
                rows,
                kv_head,
                first_head: kv_head * g,
                group: g,
                parts: 0..parts_for(start + rows - 1, BLOCK),
                split: false,
                window: None,
                bf16,
            });
        }
    }
    tasks.sort_by_key(|t| std::cmp::Reverse(t.start));
    let out_ptr = SendPtr::new(out.as_mut_ptr());
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        tasks.par_iter().for_each_init(Scratch::default, |s, task| {
            // SAFETY: every (row, head) of the prompt is in exactly one task; its query and
            // output are `D` floats inside `q` and `out`, which outlive the loop.
            unsafe {
                attend_group(
                    kernel,
                    &pool,
                    task,
                    D,
                    s,
                    |r, h| q.as_ptr().add(((task.start + r) * HEADS + h) * D),
                    |r, h| out_ptr.get().add(((task.start + r) * HEADS + h) * D),
                )
            }
        });
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    std::hint::black_box(&out);
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// GFLOP/s of independent f32 multiply-adds on every thread (two operations each), with the
/// widest vectors this CPU has.
fn f32_peak_gflops() -> f64 {
    const ITERS: usize = 20_000_000;
    let t = Instant::now();
    let lanes = rayon::broadcast(|_| fma_loop(ITERS));
    let secs = t.elapsed().as_secs_f64();
    let flops: f64 = lanes.iter().map(|&l| (ITERS * CHAINS * l * 2) as f64).sum();
    flops / secs / 1e9
}

const CHAINS: usize = 12;

/// Runs `iters` rounds of `CHAINS` vector multiply-adds; returns the lanes per vector.
fn fma_loop(iters: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F is present.
            unsafe { x86::fma512(iters) };
            return 16;
        }
        if is_x86_feature_detected!("fma") {
            // SAFETY: AVX and FMA are present.
            unsafe { x86::fma256(iters) };
            return 8;
        }
    }
    let mut acc = [1f32; CHAINS];
    for _ in 0..iters {
        for a in acc.iter_mut() {
            *a = a.mul_add(0.999_999, 1e-7);
        }
    }
    std::hint::black_box(acc);
    1
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::CHAINS;
    use std::arch::x86_64::*;
    use std::hint::black_box;

    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma512(iters: usize) {
        let (a, b) = (
            black_box(_mm512_set1_ps(0.999_999)),
            black_box(_mm512_set1_ps(1e-7)),
        );
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_fmadd_ps(*x, a, b);
            }
        }
        black_box(acc);
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma256(iters: usize) {
        let (a, b) = (
            black_box(_mm256_set1_ps(0.999_999)),
            black_box(_mm256_set1_ps(1e-7)),
        );
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_fmadd_ps(*x, a, b);
            }
        }
        black_box(acc);
    }
}
