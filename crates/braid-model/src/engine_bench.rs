//! The engine alone, without HTTP or scheduler: prefill speed for one prompt at several lengths
//! and decode speed for N sequences stepping together. Shared by `braid bench-engine` and
//! `cargo bench`.
//!
//! Prefill is timed at more than one length because a prompt's cost per token grows with its
//! length (each row attends to every row before it): the curve, not one point, says whether a
//! long retrieved document or agent history is cheap to read.

use crate::model::{BatchEntry, Workspace};
use crate::LoadedModel;
use braid_kernels::{KvDtype, KvPool, KvShape};
use std::time::Instant;

pub struct EngineBenchOptions {
    /// Prompt lengths whose prefill is timed, each as one fresh prompt.
    pub prompt_tokens: Vec<usize>,
    pub batch_sizes: Vec<usize>,
    pub context: usize,
    pub decode_steps: usize,
    pub repeats: usize,
    pub kv_dtype: KvDtype,
}

impl Default for EngineBenchOptions {
    fn default() -> Self {
        Self {
            prompt_tokens: vec![512, 2048, 4096],
            batch_sizes: vec![1, 4, 16, 32],
            context: 128,
            decode_steps: 32,
            repeats: 3,
            kv_dtype: KvDtype::F16,
        }
    }
}

#[derive(Debug, serde::Serialize)]
pub struct EngineBenchReport {
    pub kernel: &'static str,
    pub threads: usize,
    pub weight_bytes: usize,
    /// How the KV cache stored keys and values (`--kv-cache-dtype`).
    pub kv_cache_dtype: &'static str,
    /// The rate at the first prompt length (the headline figure; 512 tokens by default).
    pub prefill_tokens_per_sec: f64,
    /// The kernel's multiply-add instruction from registers on every thread (GOP/s).
    pub int8_peak_gops: Option<f64>,
    /// With the AMX kernel, the AVX-512 VNNI instruction's peak beside the tiles' (its steps of
    /// few rows and its finishing run on those vectors); `None` otherwise.
    pub vector_int8_peak_gops: Option<f64>,
    /// Prefill's integer operations per second (two per multiply-add of the layers) over
    /// `int8_peak_gops`, at the first prompt length.
    pub prefill_fraction_of_peak: Option<f64>,
    /// Every prompt length timed, in the order asked.
    pub prefill: Vec<PrefillPoint>,
    /// (sequences, aggregate tokens/s, step time median ms)
    pub decode: Vec<(usize, f64, f64)>,
    /// This machine's memory read rate (GB/s, every thread), measured by the same run: at a
    /// long context decode reads every sequence's KV cache each step, and cannot go faster
    /// than the memory delivers it.
    pub memory_read_gbps: f64,
    /// (sequences, GB/s): the bytes of KV cache a median step reads (every sequence's whole
    /// context, every layer) over its time. The whole step's time, so this is a lower bound of
    /// attention's own rate; beside `memory_read_gbps` it says how close decode is to what the
    /// memory allows.
    pub decode_kv_read_gbps: Vec<(usize, f64)>,
    /// (sequences, median ms of the output layer alone for that many rows): the largest matrix
    /// of a small model with a big vocabulary (Gemma 3's 262k tokens), which a step runs only
    /// for the rows it samples.
    pub output_layer: Vec<(usize, f64)>,
}

#[derive(Debug, serde::Serialize)]
pub struct PrefillPoint {
    pub prompt_tokens: usize,
    /// Median of the repeats.
    pub tokens_per_sec: f64,
    /// The layers' share of the int8 peak, as `prefill_fraction_of_peak`. Attention's
    /// arithmetic is not counted, so a long prompt's share falls as attention grows.
    pub fraction_of_peak: Option<f64>,
    /// This length's rate over the first length's: 1.0 would mean a long prompt costs no more
    /// per token than a short one.
    pub rate_vs_first: f64,
}

/// Median tokens/s of `repeats` prefills of one fresh `len`-token prompt.
fn prefill_rate(
    m: &LoadedModel,
    len: usize,
    opts: &EngineBenchOptions,
    token: impl Fn(usize) -> u32,
    ws: &mut Workspace,
) -> crate::Result<f64> {
    let bs = 16;
    let prompt: Vec<u32> = (0..len).map(token).collect();
    let blocks = len.div_ceil(bs);
    let mut kv = KvPool::with_dtype(m.config(), bs, blocks, opts.kv_dtype);
    let table: Vec<u32> = (0..blocks as u32).collect();
    let mut rates = Vec::new();
    for _ in 0..opts.repeats.max(1) {
        let t = Instant::now();
        m.model.forward(
            &[BatchEntry {
                tokens: &prompt,
                start: 0,
                block_table: &table,
                sample: true,
                all_logits: false,
                hidden: false,
                prompt_len: len,
            }],
            &mut kv,
            ws,
        )?;
        rates.push(len as f64 / t.elapsed().as_secs_f64());
    }
    Ok(median(rates))
}

/// Median time of the output layer (final norm's output to logits) for `rows` rows.
fn output_layer_ms(m: &LoadedModel, rows: usize, repeats: usize) -> f64 {
    let cfg = m.config();
    let x: Vec<f32> = (0..rows * cfg.hidden)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let mut quant = braid_kernels::QuantizedRows::default();
    let mut logits = vec![0f32; rows * cfg.vocab_size];
    let times = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            // As a step runs it: inside the compute pool, with the other threads awake.
            braid_kernels::run_step(|| {
                quant.quantize(&x, rows, cfg.hidden);
                braid_kernels::matmul(&quant, m.model.weights.output(), &mut logits);
            });
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(times)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(m: &LoadedModel, opts: &EngineBenchOptions) -> crate::Result<EngineBenchReport> {
    let cfg = m.config();
    let bs = 16;
    let vocab = cfg.vocab_size as u32;
    let token = |i: usize| 1000 + (i as u32 * 7919) % (vocab - 2000);
    let mut ws = Workspace::default();

    let mut rates = Vec::new();
    for &len in &opts.prompt_tokens {
        rates.push((len, prefill_rate(m, len, opts, token, &mut ws)?));
    }

    let mut decode = Vec::new();
    let mut decode_kv_read_gbps = Vec::new();
    let mut output_layer = Vec::new();
    for &n in &opts.batch_sizes {
        // The context is computed once and its blocks copied to every sequence: each has a
        // cache of its own, as N distinct requests do. Shared blocks (a prefix cache's) would
        // let a CPU with a large last-level cache (260 MB on a Xeon family 6 model 207) serve
        // every sequence's reads from one cached copy, which distinct contexts never get.
        let per_seq = (opts.context + opts.decode_steps).div_ceil(bs);
        let mut kv = KvPool::with_dtype(cfg, bs, per_seq * n, opts.kv_dtype);
        let tables: Vec<Vec<u32>> = (0..n)
            .map(|s| ((s * per_seq) as u32..((s + 1) * per_seq) as u32).collect())
            .collect();
        let ctx: Vec<u32> = (0..opts.context).map(token).collect();
        if !ctx.is_empty() {
            m.model.forward(
                &[BatchEntry {
                    tokens: &ctx,
                    start: 0,
                    block_table: &tables[0],
                    sample: false,
                    all_logits: false,
                    hidden: false,
                    prompt_len: opts.context,
                }],
                &mut kv,
                &mut ws,
            )?;
        }
        for tbl in &tables[1..] {
            for (&src, &dst) in tables[0].iter().zip(tbl).take(opts.context.div_ceil(bs)) {
                kv.copy_block(src, dst);
            }
        }
        let toks: Vec<u32> = (0..n).map(token).collect();
        let mut steps = Vec::new();
        let t0 = Instant::now();
        for step in 0..opts.decode_steps {
            let entries: Vec<BatchEntry> = (0..n)
                .map(|s| BatchEntry {
                    tokens: &toks[s..s + 1],
                    start: opts.context + step,
                    block_table: &tables[s],
                    sample: true,
                    all_logits: false,
                    hidden: false,
                    prompt_len: opts.context,
                })
                .collect();
            let t = Instant::now();
            m.model.forward(&entries, &mut kv, &mut ws)?;
            let dt = t.elapsed().as_secs_f64();
            steps.push(dt * 1e3);
        }
        let wall = t0.elapsed().as_secs_f64();
        let step_ms = median(steps);
        decode.push((n, (n * opts.decode_steps) as f64 / wall, step_ms));
        // The median step sits halfway through the steps' growing contexts.
        let context = opts.context + opts.decode_steps / 2;
        let bytes = (n * KvShape::from(cfg).bytes(context, opts.kv_dtype)) as f64;
        decode_kv_read_gbps.push((n, bytes / (step_ms / 1e3) / 1e9));
        output_layer.push((n, output_layer_ms(m, n, opts.decode_steps)));
    }
    let kernel = braid_kernels::active();
    let int8_peak_gops = braid_kernels::int8_peak::int8_peak_gops(kernel, 20_000_000);
    let vector_int8_peak_gops = (kernel == braid_kernels::Kernel::Amx)
        .then(|| {
            braid_kernels::int8_peak::int8_peak_gops(braid_kernels::Kernel::Avx512Vnni, 20_000_000)
        })
        .flatten();
    let memory_read_gbps = braid_kernels::memory_peak::memory_read_gbps(3);
    let layer_ops = 2.0 * m.model.weights.layer_multiply_adds() as f64;
    let first = rates.first().map_or(0.0, |&(_, rate)| rate);
    let prefill: Vec<PrefillPoint> = rates
        .iter()
        .map(|&(prompt_tokens, tokens_per_sec)| PrefillPoint {
            prompt_tokens,
            tokens_per_sec,
            fraction_of_peak: int8_peak_gops.map(|peak| tokens_per_sec * layer_ops / 1e9 / peak),
            rate_vs_first: tokens_per_sec / first,
        })
        .collect();
    Ok(EngineBenchReport {
        kernel: kernel.name(),
        threads: rayon::current_num_threads(),
        weight_bytes: m.model.weights.size_in_bytes(),
        kv_cache_dtype: opts.kv_dtype.name(),
        prefill_tokens_per_sec: first,
        int8_peak_gops,
        vector_int8_peak_gops,
        prefill_fraction_of_peak: prefill.first().and_then(|p| p.fraction_of_peak),
        prefill,
        decode,
        memory_read_gbps,
        decode_kv_read_gbps,
        output_layer,
    })
}

impl std::fmt::Display for EngineBenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        writeln!(
            f,
            "kernel {} · {} threads · {:.1} MB of packed weights · {} KV cache",
            self.kernel,
            self.threads,
            self.weight_bytes as f64 / 1e6,
            self.kv_cache_dtype
        )?;
        for p in &self.prefill {
            write!(
                f,
                "prefill {:>5}-token prompt {:8.1} tokens/s",
                p.prompt_tokens, p.tokens_per_sec
            )?;
            if let Some(fraction) = p.fraction_of_peak {
                write!(f, "   layers at {:4.1}% of peak", 100.0 * fraction)?;
            }
            if !std::ptr::eq(p, &self.prefill[0]) {
                write!(
                    f,
                    "   {:.2}× the {}-token rate",
                    p.rate_vs_first, self.prefill[0].prompt_tokens
                )?;
            }
            writeln!(f)?;
        }
        if let Some(peak) = self.int8_peak_gops {
            write!(
                f,
                "int8 peak {peak:.0} GOP/s ({} multiply-adds from registers, every thread)",
                self.kernel
            )?;
            if let Some(vector) = self.vector_int8_peak_gops {
                write!(f, "; avx512vnni {vector:.0} GOP/s")?;
            }
            writeln!(f)?;
        }
        writeln!(
            f,
            "memory read {:.1} GB/s (every thread)",
            self.memory_read_gbps
        )?;
        let decode = self.decode.iter().zip(&self.output_layer);
        for (((n, rate, step), (_, output)), (_, kv)) in decode.zip(&self.decode_kv_read_gbps) {
            writeln!(
                f,
                "decode {n:>2} sequences          {rate:8.1} tokens/s   step p50 {step:6.2} ms   \
                 output layer {output:5.2} ms ({:.0}%)   KV read {kv:5.1} GB/s ({:.0}% of memory)",
                100.0 * output / step,
                100.0 * kv / self.memory_read_gbps
            )?;
        }
        Ok(())
    }
}
