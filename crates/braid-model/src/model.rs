//! One forward pass over a whole engine step.
//!
//! A step mixes prompt slices of some sequences with single decode tokens of others. All their
//! rows are concatenated into one `[tokens, hidden]` matrix so every linear layer reads its
//! weights once for everybody (decode is memory-bound: that is where batching pays); attention
//! is the only part that runs per sequence, against that sequence's blocks in the KV pool.
//! Logits are computed only for the rows that will be sampled: the output layer is the
//! largest matrix of a small model, and a prompt slice needs only its last row, if any, unless
//! its prompt is being scored (`echo` with `logprobs`), which wants every row.

use crate::activations::{gelu_tanh, silu};
use crate::config::{Activation, ModelConfig};
use crate::error::{ModelError, Result};
use crate::rms_norm::{rms_norm_in_place, rms_norm_rows};
use crate::rope::Rope;
use crate::weights::Weights;
use braid_kernels::attention::{
    attend_group, combine, partial_len, parts_for, GroupTask, Scratch, ROW_TILE,
};
use braid_kernels::parallel_rows::for_rows;
use braid_kernels::KvPool;
use braid_kernels::SendPtr;
use braid_kernels::{self as kernels, matmul, QuantizedRows};
use rayon::prelude::*;

pub struct Model {
    pub config: ModelConfig,
    pub weights: Weights,
    rope: Rope,
    /// The sliding-window layers' rope, which has its own base (Gemma 3: 10,000 there, a
    /// million on the global layers).
    local_rope: Option<Rope>,
}

/// One sequence's share of a step: `tokens` go to positions `start..start + tokens.len()`.
#[derive(Clone, Copy, Debug)]
pub struct BatchEntry<'a> {
    pub tokens: &'a [u32],
    pub start: usize,
    pub block_table: &'a [u32],
    /// Whether the last row's logits are wanted.
    pub sample: bool,
    /// Whether every row's logits are wanted (scoring a prompt: each row's logits give the
    /// next token's log-probability); implies the last row's.
    pub all_logits: bool,
    /// Whether every row's final hidden state (after the output norm) is wanted, to be pooled
    /// into an embedding ([`Model::forward_with_hidden`]).
    pub hidden: bool,
    /// The request's prompt length: rows at positions below it are the prompt's, whose
    /// attention is computed in bf16 ([`GroupTask::bf16`]), and the rest generated ones.
    pub prompt_len: usize,
}

impl BatchEntry<'_> {
    /// How many of the entry's rows get logits: always its last ones, so the caller can find
    /// each row's logits from these counts alone.
    pub fn logit_rows(&self) -> usize {
        match (self.all_logits, self.sample) {
            (true, _) => self.tokens.len(),
            (false, true) => 1,
            (false, false) => 0,
        }
    }

    /// The entry's rows in attention tiles of at most [`ROW_TILE`]: `(first row, rows, bf16)`,
    /// the prompt's rows and the generated ones never in one tile.
    fn attention_tiles(&self) -> impl Iterator<Item = (usize, usize, bool)> {
        let n = self.tokens.len();
        let prompt = self.prompt_len.saturating_sub(self.start).min(n);
        [(0, prompt, true), (prompt, n, false)]
            .into_iter()
            .flat_map(|(from, to, bf16)| {
                (from..to)
                    .step_by(ROW_TILE)
                    .map(move |t| (t, ROW_TILE.min(to - t), bf16))
            })
    }
}

/// Buffers reused from step to step, so the hot path does not allocate once warmed up.
#[derive(Default)]
pub struct Workspace {
    x: Vec<f32>,
    h: Vec<f32>,
    qkv: Vec<f32>,
    attn: Vec<f32>,
    /// Attention partials of rows whose key partitions several tasks share.
    partials: Vec<f32>,
    gate_up: Vec<f32>,
    act: Vec<f32>,
    proj: Vec<f32>,
    quant: QuantizedRows,
    /// Each row's position in its sequence.
    positions: Vec<usize>,
    last: Vec<f32>,
    logits: Vec<f32>,
    /// The final hidden rows of the step's `hidden` entries, after the output norm.
    hidden: Vec<f32>,
}

impl Model {
    pub fn new(config: ModelConfig, weights: Weights) -> Self {
        let c = &config;
        let rope = Rope::new(
            c.head_dim,
            c.context_length,
            c.rope_base,
            c.rope_scale,
            c.rope_style,
            weights.rope_factors.as_deref(),
        );
        let local_rope = c.sliding_window.as_ref().map(|w| {
            Rope::new(
                c.head_dim,
                c.context_length,
                w.rope_base,
                1.0,
                c.rope_style,
                None,
            )
        });
        Self {
            config,
            weights,
            rope,
            local_rope,
        }
    }

    fn check(&self, batch: &[BatchEntry], kv: &KvPool) -> Result<()> {
        for (i, e) in batch.iter().enumerate() {
            let end = e.start + e.tokens.len();
            if e.tokens.is_empty() {
                return Err(ModelError::InvalidBatch(format!("entry {i} has no tokens")));
            }
            if end > self.config.context_length {
                return Err(ModelError::ContextOverflow {
                    len: end,
                    max: self.config.context_length,
                });
            }
            if e.block_table.len() * kv.block_size() < end {
                return Err(ModelError::InvalidBatch(format!(
                    "entry {i}: {} blocks cannot hold {end} positions",
                    e.block_table.len()
                )));
            }
            if let Some(&b) = e
                .block_table
                .iter()
                .find(|&&b| b as usize >= kv.num_blocks())
            {
                return Err(ModelError::InvalidBatch(format!(
                    "entry {i}: block {b} is outside the pool"
                )));
            }
            if let Some(&t) = e
                .tokens
                .iter()
                .find(|&&t| t as usize >= self.config.vocab_size)
            {
                return Err(ModelError::InvalidBatch(format!(
                    "entry {i}: token id {t} is outside the vocabulary"
                )));
            }
        }
        Ok(())
    }

    /// Runs the step and returns the logits of the wanted rows, in batch order, `vocab_size`
    /// floats each: every row of an `all_logits` entry, the last row of a `sample` entry.
    pub fn forward<'w>(
        &self,
        batch: &[BatchEntry],
        kv: &mut KvPool,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32]> {
        self.check(batch, kv)?;
        // A step runs ~150 parallel loops. Started from a thread outside the compute pool, each
        // would hand its work over and sleep until it is done (two thread wake-ups per loop);
        // started from inside, the pool's threads only share work.
        braid_kernels::run_step(|| self.forward_in_pool(batch, kv, ws))
    }

    /// Runs the step like [`forward`](Self::forward) and also returns the final hidden state
    /// (after the output norm) of every row of each `hidden` entry, in batch order,
    /// `hidden_size` floats each: what an embedding pools.
    pub fn forward_with_hidden<'w>(
        &self,
        batch: &[BatchEntry],
        kv: &mut KvPool,
        ws: &'w mut Workspace,
    ) -> Result<(&'w [f32], &'w [f32])> {
        let n = self.forward(batch, kv, ws)?.len();
        Ok((&ws.logits[..n], &ws.hidden))
    }

    /// The step's sequential loops (norms, rope, activations, quantizing them, cache writes)
    /// are compiled once per instruction set like the kernels, so they vectorize on a CPU
    /// that has more than the binary's baseline; the matmuls and attention dispatch themselves.
    fn forward_in_pool<'w>(
        &self,
        batch: &[BatchEntry],
        kv: &mut KvPool,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32]> {
        kernels::active().run_float_loops(ForwardSteps {
            model: self,
            batch,
            kv,
            ws,
        })
    }

    #[inline(always)]
    fn forward_steps<'w>(
        &self,
        batch: &[BatchEntry],
        kv: &mut KvPool,
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32]> {
        let c = &self.config;
        let (h, f) = (c.hidden, c.ffn);
        let (q_w, kv_w) = (c.q_width(), c.kv_width());
        let qkv_w = q_w + 2 * kv_w;
        let t: usize = batch.iter().map(|e| e.tokens.len()).sum();

        ws.x.resize(t * h, 0.0);
        ws.h.resize(t * h, 0.0);
        ws.qkv.resize(t * qkv_w, 0.0);
        ws.attn.resize(t * q_w, 0.0);
        ws.gate_up.resize(t * 2 * f, 0.0);
        ws.act.resize(t * f, 0.0);
        ws.proj.resize(t * h, 0.0);

        ws.positions.clear();
        for e in batch {
            ws.positions.extend(e.start..e.start + e.tokens.len());
        }
        for (row, &tok) in batch.iter().flat_map(|e| e.tokens).enumerate() {
            let x = &mut ws.x[row * h..(row + 1) * h];
            self.weights.embedding.dequantize_row(tok as usize, x);
            if c.embedding_scale != 1.0 {
                x.iter_mut().for_each(|v| *v *= c.embedding_scale);
            }
        }

        for (li, layer) in self.weights.layers.iter().enumerate() {
            rms_norm_rows(&ws.x, &layer.attn_norm, c.rms_eps, &mut ws.h);
            ws.quant.quantize(&ws.h, t, h);
            matmul(&ws.quant, &layer.qkv, &mut ws.qkv);

            let window = c.window(li);
            let rope = match (window, &self.local_rope) {
                (Some(_), Some(local)) => local,
                _ => &self.rope,
            };
            for_rows(
                &mut ws.qkv,
                qkv_w,
                #[inline(always)]
                |row, r| {
                    let pos = ws.positions[row];
                    if let Some(bias) = &layer.qkv_bias {
                        add_in_place(r, bias);
                    }
                    let (q, rest) = r.split_at_mut(q_w);
                    let (k, _) = rest.split_at_mut(kv_w);
                    if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                        rms_norm_in_place(q, qn, c.rms_eps);
                        rms_norm_in_place(k, kn, c.rms_eps);
                    }
                    rope.apply(q, pos);
                    rope.apply(k, pos);
                },
            );
            let mut row = 0;
            for e in batch {
                for i in 0..e.tokens.len() {
                    let r = &ws.qkv[(row + i) * qkv_w..(row + i + 1) * qkv_w];
                    let (k, v) = r[q_w..].split_at(kv_w);
                    kv.write(li, e.block_table, e.start + i, k, v);
                }
                row += e.tokens.len();
            }

            self.attention(batch, li, kv, ws, qkv_w, window);

            ws.quant.quantize(&ws.attn, t, q_w);
            matmul(&ws.quant, &layer.attn_out, &mut ws.proj);
            add_residual(
                &mut ws.x,
                &mut ws.proj,
                h,
                layer.post_attn_norm.as_deref(),
                c.rms_eps,
            );

            rms_norm_rows(&ws.x, &layer.ffn_norm, c.rms_eps, &mut ws.h);
            ws.quant.quantize(&ws.h, t, h);
            matmul(&ws.quant, &layer.gate_up, &mut ws.gate_up);
            let gate_up = &ws.gate_up;
            for_rows(
                &mut ws.act,
                f,
                #[inline(always)]
                |r, act| {
                    let (gate, up) = gate_up[r * 2 * f..(r + 1) * 2 * f].split_at(f);
                    match c.activation {
                        Activation::Silu => {
                            for ((a, g), u) in act.iter_mut().zip(gate).zip(up) {
                                *a = silu(*g) * u;
                            }
                        }
                        Activation::GeluTanh => {
                            for ((a, g), u) in act.iter_mut().zip(gate).zip(up) {
                                *a = gelu_tanh(*g) * u;
                            }
                        }
                    }
                },
            );
            ws.quant.quantize(&ws.act, t, f);
            matmul(&ws.quant, &layer.down, &mut ws.proj);
            add_residual(
                &mut ws.x,
                &mut ws.proj,
                h,
                layer.post_ffn_norm.as_deref(),
                c.rms_eps,
            );
        }

        let mut wanted_rows = Vec::new();
        let mut hidden_rows = Vec::new();
        let mut row = 0;
        for e in batch {
            if e.hidden {
                hidden_rows.extend(row..row + e.tokens.len());
            }
            row += e.tokens.len();
            wanted_rows.extend(row - e.logit_rows()..row);
        }
        ws.hidden.clear();
        if !hidden_rows.is_empty() {
            let n = hidden_rows.len();
            ws.last.resize(n * h, 0.0);
            for (i, &r) in hidden_rows.iter().enumerate() {
                ws.last[i * h..(i + 1) * h].copy_from_slice(&ws.x[r * h..(r + 1) * h]);
            }
            ws.hidden.resize(n * h, 0.0);
            rms_norm_rows(
                &ws.last,
                &self.weights.output_norm,
                c.rms_eps,
                &mut ws.hidden,
            );
        }
        let s = wanted_rows.len();
        ws.last.resize(s * h, 0.0);
        for (i, &r) in wanted_rows.iter().enumerate() {
            ws.last[i * h..(i + 1) * h].copy_from_slice(&ws.x[r * h..(r + 1) * h]);
        }
        ws.h.resize(s * h, 0.0);
        rms_norm_rows(&ws.last, &self.weights.output_norm, c.rms_eps, &mut ws.h);
        ws.logits.resize(s * c.vocab_size, 0.0);
        ws.quant.quantize(&ws.h, s, h);
        matmul(&ws.quant, self.weights.output(), &mut ws.logits);
        if let Some(cap) = c.logit_softcap {
            ws.logits
                .iter_mut()
                .for_each(|l| *l = (*l / cap).tanh() * cap);
        }
        Ok(&ws.logits[..s * c.vocab_size])
    }

    /// Inlined into the step, like its row loops, so that the merging of split partitions
    /// ([`combine`]) compiles to the step's instruction set: on the baseline its fused
    /// multiply-adds were calls into libm's `fmaf`.
    #[inline(always)]
    fn attention(
        &self,
        batch: &[BatchEntry],
        layer: usize,
        kv: &KvPool,
        ws: &mut Workspace,
        qkv_w: usize,
        window: Option<usize>,
    ) {
        let c = &self.config;
        let (q_w, d) = (c.q_width(), c.head_dim);
        let group = c.num_heads / c.num_kv_heads;
        let tiles: usize = batch.iter().map(|e| e.attention_tiles().count()).sum();
        let threads = rayon::current_num_threads();
        let bs = kv.block_size();
        let plen = partial_len(d);
        // A lone sequence has as few tasks as KV heads (3 for the default model), which two
        // cores would split 2 + 1. At a short context each query head then gets its own task:
        // the KV blocks are read once per query head instead of once per group, but from
        // cache, and the cores finish together. At a long context the keys themselves are
        // split: tasks of a few key partitions each, whose partials are merged after. Every
        // (row, head) is computed alike whichever way.
        let few = tiles * c.num_kv_heads < 2 * threads;
        let per_tile = (4 * threads).div_ceil(tiles * c.num_kv_heads);
        let mut tasks = Vec::new();
        let mut split_tiles = Vec::new();
        let mut row = 0;
        for e in batch {
            for (tile, rows, bf16) in e.attention_tiles() {
                let start = e.start + tile;
                let n_parts = parts_for(start + rows - 1, bs);
                // A sliding window skips the partitions wholly before the tile's first row's.
                let first = window.map_or(0, |w| parts_for((start + 1).saturating_sub(w), bs) - 1);
                let task = |first_head, group, parts, split| GroupTask {
                    layer,
                    block_table: e.block_table,
                    start,
                    rows,
                    kv_head: first_head / (c.num_heads / c.num_kv_heads),
                    first_head,
                    group,
                    parts,
                    split,
                    window,
                    bf16,
                };
                if few && n_parts - first > 1 {
                    let step = (n_parts - first).div_ceil(per_tile);
                    for kv_head in 0..c.num_kv_heads {
                        for p in (first..n_parts).step_by(step) {
                            let parts = p..(p + step).min(n_parts);
                            tasks.push((row + tile, task(kv_head * group, group, parts, true)));
                        }
                    }
                    split_tiles.push((row + tile, rows, first..n_parts));
                } else if few {
                    for head in 0..c.num_heads {
                        tasks.push((row + tile, task(head, 1, first..n_parts, false)));
                    }
                } else {
                    for kv_head in 0..c.num_kv_heads {
                        let parts = first..n_parts;
                        tasks.push((row + tile, task(kv_head * group, group, parts, false)));
                    }
                }
            }
            row += e.tokens.len();
        }
        let max_parts = split_tiles.iter().map(|(_, _, p)| p.end).max().unwrap_or(0);
        let rows_total = ws.attn.len() / q_w;
        ws.partials
            .resize(rows_total * c.num_heads * max_parts * plen, 0.0);
        let qkv = SendPtr::new(ws.qkv.as_mut_ptr());
        let out = SendPtr::new(ws.attn.as_mut_ptr());
        let partials = SendPtr::new(ws.partials.as_mut_ptr());
        let kernel = kernels::active();
        // Costliest tasks first (rows × keys read), so the two cores finish together.
        tasks.sort_by_key(|(_, t)| {
            std::cmp::Reverse(
                t.rows * t.parts.len().min(parts_for(t.start + t.rows - 1, bs)) * t.group,
            )
        });
        tasks
            .par_iter()
            .for_each_init(Scratch::default, |scratch, (row0, task)| {
                // SAFETY: the task's rows `row0..row0 + task.rows` are rows of the step, so a
                // query (the first `q_w` floats of a `qkv_w`-wide row of `ws.qkv`) and an output
                // (a row of `ws.attn`, `q_w` wide) of `d` floats lies inside its buffer, both
                // resized to the step's rows; a split task's (row, head) partial array of
                // `max_parts` entries lies inside `ws.partials`, resized to every row and head.
                // Nothing writes `ws.qkv` during the loop; every (row, head) of the step is in
                // exactly one whole task, or in split tasks that cover disjoint partitions, so
                // what a task writes is written and read by no other task.
                unsafe {
                    attend_group(
                        kernel,
                        kv,
                        task,
                        d,
                        scratch,
                        |i, head| {
                            qkv.get()
                                .wrapping_add((row0 + i) * qkv_w + head * d)
                                .cast_const()
                        },
                        |i, head| {
                            if task.split {
                                let at = ((row0 + i) * c.num_heads + head) * max_parts * plen;
                                partials.get().wrapping_add(at)
                            } else {
                                out.get().wrapping_add((row0 + i) * q_w + head * d)
                            }
                        },
                    )
                };
            });
        for (row0, rows, parts) in split_tiles {
            for r in row0..row0 + rows {
                for head in 0..c.num_heads {
                    let at = (r * c.num_heads + head) * max_parts * plen;
                    combine(
                        &ws.partials[at + parts.start * plen..at + parts.end * plen],
                        &mut ws.attn[r * q_w + head * d..][..d],
                    );
                }
            }
        }
    }
}

/// One forward, as code to compile for the kernel's float loops.
struct ForwardSteps<'a, 'w> {
    model: &'a Model,
    batch: &'a [BatchEntry<'a>],
    kv: &'a mut KvPool,
    ws: &'w mut Workspace,
}

impl<'w> kernels::FloatLoops for ForwardSteps<'_, 'w> {
    type Output = Result<&'w [f32]>;

    #[inline(always)]
    unsafe fn run<L: kernels::Lanes>(self) -> Self::Output {
        self.model.forward_steps(self.batch, self.kv, self.ws)
    }
}

/// `x += y`, with `y` first normalized row by row when the family norms its sublayers'
/// outputs (Gemma 3).
#[inline(always)]
fn add_residual(x: &mut [f32], y: &mut [f32], width: usize, post_norm: Option<&[f32]>, eps: f32) {
    if let Some(w) = post_norm {
        for_rows(
            y,
            width,
            #[inline(always)]
            |_, yr| rms_norm_in_place(yr, w, eps),
        );
    }
    let y = &*y;
    for_rows(
        x,
        width,
        #[inline(always)]
        |r, xr| add_in_place(xr, &y[r * width..(r + 1) * width]),
    );
}

#[inline(always)]
fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
