//! Causal attention of one sequence's new rows against that sequence's own cached keys and
//! values. Sequences in a step never see each other: each reads only the blocks of its own
//! block table, which is what lets one forward carry many unrelated requests.
//!
//! Keys and values dominate the cost as contexts grow (23 KB of half floats per cached token
//! for the default model), so a unit of work reads each KV block once per pass and applies it
//! to every query row of a tile and every query head that shares the KV head (grouped-query
//! attention). A row's result depends only on its position and its own cache, never on which
//! other rows or heads share the task: chunked prefill and batching stay bit-identical.
//!
//! Keys are taken in partitions of [`PART_BLOCKS`] blocks fixed by position (flash-decoding):
//! each partition yields its own maximum, sum of exponentials and unnormalized weighted sum of
//! values, and [`combine`] merges a row's partitions in order. A lone sequence at a long
//! context can then spread one row's keys over every core (tasks of a few partitions each,
//! merged after), and since the partitions do not depend on how the work is split, a row gets
//! the same bits whether one task or many computed it.
//!
//! Inside a partition both passes are small matrix products held in registers, shaped so that
//! each loaded vector feeds many multiply-adds: scores take up to 6 queries against 2 blocks of
//! keys at once (a prompt tile), or 1 to 3 queries against 4 blocks (a decoding row,
//! whose few chains would otherwise wait on each other); the value pass takes up to 6 (row,
//! head) pairs that read the same keys of a block, or for a prompt's rows of a run of up to
//! [`VALUE_RUN`] blocks that they all see whole. The order of every sum is that of a lone
//! row, so the grouping changes the speed and never the bits. q8_0 keys are scored apart, by
//! int8 dot products with the query rounded to q8_0 ([`attention_q8`]), except a prompt's
//! bf16 rows', which widen them. A long prompt's attention ran at
//! a quarter of the f32 multiply-add peak when it took one block and at most 6 queries at a
//! time, one row's heads in the value pass, and a softmax whose power of two was a checked
//! float-to-int cast (`cargo bench -p braid-kernels --bench attention`).

use crate::attention_bf16::{self, FmaScores, FmaValues, PairedSums, ScoreRun};
use crate::attention_q8::{self, QuantizedQueries};
use crate::attention_tiles::{
    blocks_together, prev_power_of_two, queries_together, read16, score_tiles, scores16,
    WeightedSums, LANES, MAX_RUN,
};
use crate::exponential::exp_approx;
use crate::kv_pool::Q8_GROUP;
use crate::kv_widen::{dequantize16, widen_keys, widen_values, widened_key_scales, widened_scales};
use crate::{FloatLoops, Kernel, Lanes};
use crate::{KvBlock, KvDtype, KvPool};

/// Query rows of one sequence that one task handles together.
pub const ROW_TILE: usize = 64;

/// How many blocks ahead of the one computed attention asks the cache for. A sequence's blocks
/// lie anywhere in the pool, so each is a stream of its own that the hardware prefetchers
/// pick up late, and one block (2 KB of the default model's keys) ahead was too little to
/// hide the memory's latency: sixteen sequences at 4,096 tokens, each context in memory of its
/// own, decoded 1.2× faster three blocks ahead (`braid bench-engine --context 4096`). Each
/// pass of a partition also asks the second-level cache for what the other pass reads next
/// (the key pass for its blocks' values, the value pass for the next partition's keys): every
/// pass used to start cold, waiting on the memory for its first blocks, and on an AMD EPYC
/// (Zen 4) sixteen such sequences decoded at under a third of the memory's rate; with it,
/// 1.4–1.6× faster.
const PREFETCH_AHEAD: usize = 3;

/// KV blocks per key partition (256 positions with blocks of 16).
pub const PART_BLOCKS: usize = 16;

/// Floats of one partition's partial result: its maximum score, its sum of exponentials, then
/// the `head_dim` floats of its unnormalized weighted sum of values.
pub fn partial_len(head_dim: usize) -> usize {
    head_dim + 2
}

/// Key partitions a row at `pos` reads.
pub fn parts_for(pos: usize, block_size: usize) -> usize {
    pos / (PART_BLOCKS * block_size) + 1
}

/// One (sequence, KV head, tile of rows) unit of work.
pub struct GroupTask<'a> {
    pub layer: usize,
    pub block_table: &'a [u32],
    /// Position of the first row of the tile.
    pub start: usize,
    pub rows: usize,
    pub kv_head: usize,
    /// Query heads reading this KV head: `first_head..first_head + group`.
    pub first_head: usize,
    pub group: usize,
    /// Key partitions this task reads (clipped to those its last row sees).
    pub parts: std::ops::Range<usize>,
    /// Whether other tasks read the rows' other partitions: then `out(row, head)` is the
    /// (row, head)'s array of partials (one [`partial_len`] entry per partition, indexed by
    /// partition) and the task writes its partitions' entries there, for [`combine`] to merge;
    /// otherwise `out(row, head)` is the output vector.
    pub split: bool,
    /// Sliding-window layers: a row at position `p` sees only the keys after `p - window`.
    /// Blocks wholly before a row's window are not read for it.
    pub window: Option<usize>,
    /// Whether the rows are a prompt's (positions below its request's prompt length), whose
    /// attention is computed in bf16 ([`crate::attention_bf16`]); generated rows' is f32. A
    /// task never mixes the two.
    pub bf16: bool,
}

/// Per-thread buffers: every (row, head)'s scores over one partition, its partials, and one
/// block's keys or values widened to f32.
#[derive(Default)]
pub struct Scratch {
    scores: Vec<f32>,
    partials: Vec<f32>,
    wide: Vec<f32>,
    scales: Vec<f32>,
    /// bf16 rows: the queries rounded (`[row][head][dim]`), and for `vdpbf16ps` their pairs.
    queries: Vec<f32>,
    query_pairs: Vec<u32>,
    /// bf16 rows: the widened keys' or values' pairs for `vdpbf16ps`.
    pairs: Vec<u32>,
    /// bf16 rows for `vdpbf16ps`: every (row, head)'s weights over one partition, in pairs.
    weight_pairs: Vec<u32>,
    /// f32 rows over q8_0 keys: every (row, head)'s query rounded to q8_0.
    q8_queries: QuantizedQueries,
}

/// Readers (rows × query heads) of one KV block from which the block is widened to f32 once
/// and read from there by all of them, instead of widened by each: a prompt tile's 64 rows
/// would otherwise widen every block 64 times per head.
const WIDEN_ONCE_READERS: usize = 4;

/// Blocks of values a prompt's value pass takes at once where every row sees them whole, each
/// (row, head)'s sums held in registers across them: one block at a time, loading and storing
/// the sums around every 8 slot pairs, a prompt's attention took 1.04–1.08× as long at 2,048
/// to 8,192 tokens (`cargo bench -p braid-kernels --bench attention`, AMD EPYC Zen 4). Eight
/// blocks' value pairs (16 KB for heads of 64) stay in the first-level cache while the task's
/// readers go through them; four or sixteen were no faster.
const VALUE_RUN: usize = 8;

/// Merges one (row, head)'s partials (`parts` entries of [`partial_len`] floats, in partition
/// order) into its attention output `out`: each partition's sums are rescaled to the row's
/// maximum, added in partition order, and divided by the total weight. Partitions the row does
/// not see (sum 0) are skipped. Inlined so that its fused multiply-adds compile to the
/// caller's instruction set rather than to library calls on the x86-64-v2 baseline.
#[inline(always)]
pub fn combine(partials: &[f32], out: &mut [f32]) {
    let len = out.len() + 2;
    let max = partials
        .chunks_exact(len)
        .filter(|p| p[1] > 0.0)
        .fold(f32::NEG_INFINITY, |m, p| m.max(p[0]));
    out.fill(0.0);
    let mut total = 0f32;
    for p in partials.chunks_exact(len).filter(|p| p[1] > 0.0) {
        let w = exp_approx(p[0] - max);
        total = w.mul_add(p[1], total);
        for (o, v) in out.iter_mut().zip(&p[2..]) {
            *o = w.mul_add(*v, *o);
        }
    }
    let inv = 1.0 / total;
    out.iter_mut().for_each(|o| *o *= inv);
}

/// Computes the task's outputs. `q(row, head)` points at a query vector, `out(row, head)` at
/// where its result goes; both `head_dim` floats.
///
/// Two passes over the blocks: scores from the keys, then the softmax-weighted sum of the
/// values. Each (row, head) is computed in exactly the order a lone row would be.
///
/// Pointers rather than slices because the tasks of a step read and write different parts of
/// the same two buffers at once, and `&mut` slices of each task's parts could only be carved
/// out by walking every task's rows and heads in order.
///
/// The loops are compiled once per instruction set; `kernel` chooses which copy runs, and
/// every copy computes the same bits.
///
/// # Safety
///
/// For every `row < task.rows` and `head` in `task.first_head..task.first_head + task.group`:
/// `q(row, head)` must be valid for reads of `head_dim` floats, and `out(row, head)` valid for
/// reads and writes of `head_dim` floats, or with `task.split` of the entries of `task.parts`
/// in a partial array (`partial_len(head_dim)` floats per partition, from partition 0), for
/// the whole call. Those `out` regions must not overlap one another or any `q` vector, and no
/// one else may write a `q` vector, or read or write those regions, until the call returns.
pub unsafe fn attend_group<Q, O>(
    kernel: Kernel,
    pool: &KvPool,
    task: &GroupTask,
    head_dim: usize,
    s: &mut Scratch,
    q: Q,
    out: O,
) where
    Q: Fn(usize, usize) -> *const f32,
    O: Fn(usize, usize) -> *mut f32,
{
    // The float loops check that this CPU runs the kernel.
    kernel.run_float_loops(Attend {
        pool,
        task,
        head_dim,
        native: task.bf16 && attention_bf16::native(kernel),
        s,
        q,
        out,
    })
}

/// One call of [`attend`], as code to compile for the kernel's float loops.
struct Attend<'a, Q, O> {
    pool: &'a KvPool,
    task: &'a GroupTask<'a>,
    head_dim: usize,
    /// bf16 rows multiplied with `vdpbf16ps`.
    native: bool,
    s: &'a mut Scratch,
    q: Q,
    out: O,
}

impl<Q, O> FloatLoops for Attend<'_, Q, O>
where
    Q: Fn(usize, usize) -> *const f32,
    O: Fn(usize, usize) -> *mut f32,
{
    type Output = ();

    #[inline(always)]
    unsafe fn run<L: Lanes>(self) {
        let Attend {
            pool,
            task,
            head_dim,
            native,
            s,
            q,
            out,
        } = self;
        // SAFETY: the caller vouches for `L`'s features, and `attend_group` for the CPU
        // having AVX-512 BF16 where `native`; the rest is `attend_group`'s caller's promise.
        unsafe { attend::<L, Q, O>(pool, task, head_dim, native, s, q, out) }
    }
}

/// The body of [`attend_group`], for one instruction set's [`Lanes`].
///
/// # Safety
///
/// The CPU must have `L`'s features, and AVX-512 BF16 where `native`; otherwise as for
/// [`attend_group`].
#[inline(always)]
unsafe fn attend<L: Lanes, Q, O>(
    pool: &KvPool,
    task: &GroupTask,
    head_dim: usize,
    native: bool,
    s: &mut Scratch,
    q: Q,
    out: O,
) where
    Q: Fn(usize, usize) -> *const f32,
    O: Fn(usize, usize) -> *mut f32,
{
    let (bs, d, g) = (pool.block_size(), head_dim, task.group);
    let scale = 1.0 / (d as f32).sqrt();
    let last_pos = task.start + task.rows - 1;
    let part_len = PART_BLOCKS * bs;
    let parts = task.parts.start..task.parts.end.min(parts_for(last_pos, bs));
    let (np, plen) = (parts.len(), partial_len(d));
    // The first key position row `row` sees, and the rows that see some of block `b`: those
    // from `first_row(b)` (whose position reaches the block) to `end_row(b)` (whose window
    // has not yet passed it).
    let row_lo = |row: usize| {
        task.window
            .map_or(0, |w| (task.start + row + 1).saturating_sub(w))
    };
    let end_row = |b: usize| {
        task.window
            .and_then(|w| w.checked_add((b + 1) * bs))
            .map_or(task.rows, |x| {
                x.saturating_sub(task.start + 1).min(task.rows)
            })
    };
    let first_block = row_lo(0) / bs;
    s.scores.resize(task.rows * g * part_len, 0.0);
    s.partials.resize(task.rows * g * np * plen, 0.0);
    // Called only with `row < task.rows` and `head < g`, and no slice from either closure is
    // held across the creation of an output slice of the same (row, head).
    let query = |row: usize, head: usize| {
        // SAFETY: a query vector the caller vouches for, which nobody writes during the call.
        unsafe { std::slice::from_raw_parts(q(row, task.first_head + head), d) }
    };
    // Rows `first_row(b)..` sit at positions that see block `b`, the first `visible` keys of it.
    let first_row = |b: usize| (b * bs).saturating_sub(task.start);
    let visible = |b: usize, row: usize| bs.min(task.start + row + 1 - b * bs);
    // Block `b` if the task reads it, to prefetch.
    let block_at = |b: usize| {
        let id = task.block_table.get(b).filter(|_| b <= last_pos / bs);
        id.map(|&n| pool.block(task.layer, n, task.kv_head))
    };
    let bf16 = task.bf16;
    // Whether every row of the task sees all of block `b` (and so sums over all its slots).
    let seen_whole = |b: usize| (b + 1) * bs <= task.start + 1 && row_lo(task.rows - 1) <= b * bs;
    // q8_0 keys of rows scored in f32: int8 dot products with the queries rounded to q8_0.
    let q8 = pool.dtype() == KvDtype::Q8_0 && !bf16;
    if q8 {
        // SAFETY: our caller vouches for `L`'s features.
        unsafe {
            s.q8_queries
                .fill::<L>(task.rows * g, d, |r| query(r / g, r % g))
        };
    }
    if bf16 {
        assert_eq!(bs, LANES, "bf16 attention takes blocks of 16 keys");
        s.queries.clear();
        s.query_pairs.clear();
        for row in 0..task.rows {
            for head in 0..g {
                s.queries.extend_from_slice(query(row, head));
            }
        }
        attention_bf16::round_vector(&mut s.queries, native, &mut s.query_pairs);
        if native {
            s.weight_pairs.resize(task.rows * g * part_len / 2, 0);
        }
    }

    for (pi, p) in parts.clone().enumerate() {
        let blocks =
            (p * PART_BLOCKS).max(first_block)..((p + 1) * PART_BLOCKS).min(last_pos / bs + 1);
        // Runs of consecutive blocks that the same rows read are scored together when those
        // rows are few (a decoding row's group of heads): their multiply-add chains then
        // overlap, where one block's would each wait on the one before.
        let mut b = blocks.start;
        while b < blocks.end {
            let rows = first_row(b)..end_row(b);
            let readers = rows.len() * g;
            let same = (b..blocks.end)
                .take_while(|&c| first_row(c) == rows.start && end_row(c) == rows.end)
                .count();
            let nb = blocks_together(readers, L::ACCUMULATORS).min(prev_power_of_two(same));
            let run: [usize; MAX_RUN] = std::array::from_fn(|i| b + i.min(nb - 1));
            let keys = run.map(|c| pool.block(task.layer, task.block_table[c], task.kv_head).0);
            for (keys, _) in to_prefetch(b, nb, blocks.start).filter_map(block_at) {
                prefetch(keys, Cache::L1);
            }
            // These blocks' values, which the value pass reads once the partition is scored.
            for (_, values) in (b..b + nb).filter_map(block_at) {
                prefetch(values, Cache::L2);
            }
            assert!(
                keys.iter().all(|k| k.values() == d * bs),
                "a block holds head_dim × block_size keys"
            );
            let wide = (readers >= WIDEN_ONCE_READERS && !q8) || bf16;
            if wide {
                s.wide.resize(nb * d * bs, 0.0);
                for (i, keys) in keys[..nb].iter().enumerate() {
                    // SAFETY: our caller vouches for `L`'s features.
                    unsafe { widen_keys::<L>(*keys, bs, &mut s.wide[i * d * bs..][..d * bs]) };
                }
            }
            let at = (b - p * PART_BLOCKS) * bs;
            let first_reader = rows.start * g;
            if bf16 {
                let wide = &mut s.wide[..nb * d * bs];
                attention_bf16::round_keys(wide, native, &mut s.pairs);
                let run = ScoreRun {
                    first: first_reader,
                    readers,
                    nb,
                    accumulators: L::ACCUMULATORS,
                    scale,
                    scores: &mut s.scores[at..],
                    stride: part_len,
                };
                let fma = FmaScores {
                    queries: &s.queries,
                    keys: &s.wide,
                    d,
                };
                let pairs = native.then_some((&s.query_pairs[..], &s.pairs[..]));
                // SAFETY: the rounded queries (and their pairs where `native`) hold every
                // (row, head) of the task and the keys `nb` blocks; `scores` holds each
                // reader's `part_len` scores from `at`; the caller vouches for `L`'s features,
                // and for AVX-512 BF16 where `native`.
                unsafe { run.run_either(&fma, pairs) };
                b += nb;
                continue;
            }
            if q8 {
                // The keys' scales as f32, `[block][group]` of 16 slots each.
                // SAFETY: our caller vouches for `L`'s features.
                unsafe { widened_key_scales::<L>(&keys[..nb], &mut s.scales) };
                let groups = d / Q8_GROUP;
                let mut i = 0;
                while i < readers {
                    let qn = (readers - i).min(attention_q8::QUERIES_TOGETHER);
                    macro_rules! score_q8 {
                        ($($qn:literal),*) => {
                            match qn {
                                $($qn => {
                                    let mut who = [first_reader + i; $qn];
                                    for (k, w) in who.iter_mut().enumerate() {
                                        *w += k;
                                    }
                                    for (c, key) in keys[..nb].iter().enumerate() {
                                        let KvBlock::Q8_0 { quants, .. } = key else {
                                            unreachable!("a q8_0 pool gives q8_0 blocks")
                                        };
                                        // SAFETY: a block holds `d × bs` keys (asserted) and
                                        // `s.scales` 16 per group of each of the `nb` blocks;
                                        // our caller vouches for `L`'s features.
                                        let scores = unsafe {
                                            attention_q8::scores::<L, $qn>(
                                                &s.q8_queries,
                                                who,
                                                quants,
                                                &s.scales[c * groups * LANES..],
                                                bs,
                                            )
                                        };
                                        for (&r, x) in who.iter().zip(&scores) {
                                            let at = r * part_len + at + c * LANES;
                                            for (o, x) in s.scores[at..at + LANES].iter_mut().zip(x) {
                                                *o = x * scale;
                                            }
                                        }
                                    }
                                })*
                                _ => unreachable!("at most QUERIES_TOGETHER queries"),
                            }
                        };
                    }
                    score_q8!(1, 2, 3, 4);
                    i += qn;
                }
                b += nb;
                continue;
            }
            // Read in place as half floats.
            let halves = keys.map(|k| match k {
                KvBlock::F16(h) => h,
                KvBlock::Q8_0 { .. } => unreachable!("q8_0 keys are scored above"),
            });
            // Every (row, head) reading the blocks, taken as many at a time as registers
            // allow: each key vector serves them all.
            let mut i = 0;
            while i < readers {
                let qn = queries_together(readers - i, nb, L::ACCUMULATORS);
                macro_rules! score_group {
                    ($(($nb:literal, $qn:literal)),*) => {
                        match (nb, qn) {
                            $(($nb, $qn) => {
                                let who: [(usize, usize); $qn] = std::array::from_fn(|k| {
                                    ((first_reader + i + k) / g, (first_reader + i + k) % g)
                                });
                                let q = who.map(|(row, head)| query(row, head));
                                // SAFETY: `c < nb` and `dim < d`, so `c * d * bs + dim * bs +
                                // 16 <= nb * d * bs`, the length of `s.wide` when widened, and
                                // `dim * bs + 16 <= d * bs`, that of each block's keys
                                // (asserted); our caller vouches for `L`'s features.
                                let scores = unsafe {
                                    if wide {
                                        let widened = s.wide.as_ptr();
                                        scores16::<$nb, $qn>(q, #[inline(always)] |c, dim| {
                                            read16(widened.add((c * d + dim) * bs))
                                        })
                                    } else {
                                        scores16::<$nb, $qn>(q, #[inline(always)] |c, dim| {
                                            L::widen16(&*(halves[c].as_ptr().add(dim * bs)
                                                as *const [u16; LANES]))
                                        })
                                    }
                                };
                                for (&(row, head), scores) in who.iter().zip(&scores) {
                                    // All 16 of each block: keys a row does not see get
                                    // scores that nothing reads.
                                    let at = (row * g + head) * part_len + at;
                                    for (dst, x) in s.scores[at..at + $nb * LANES]
                                        .chunks_exact_mut(LANES)
                                        .zip(scores)
                                    {
                                        for (o, x) in dst.iter_mut().zip(x) {
                                            *o = x * scale;
                                        }
                                    }
                                }
                            })*
                            _ => unreachable!("a block run and query group scores16 has"),
                        }
                    };
                }
                score_tiles!(score_group);
                i += qn;
            }
            b += nb;
        }
        for row in 0..task.rows {
            for head in 0..g {
                let partial = &mut s.partials[((row * g + head) * np + pi) * plen..][..plen];
                partial[2..].fill(0.0);
                // Keys of this partition the row sees: none if it starts after the row.
                let seen = (task.start + row + 1)
                    .saturating_sub(p * part_len)
                    .min(part_len);
                // ...and none before the row's window.
                let lo = row_lo(row).saturating_sub(p * part_len);
                if lo >= seen {
                    partial[..2].copy_from_slice(&[f32::NEG_INFINITY, 0.0]);
                    continue;
                }
                let reader = row * g + head;
                let scores = &mut s.scores[reader * part_len..][..part_len];
                let max = max_of(&scores[lo..seen]);
                let sum = if bf16 {
                    let pairs = match native {
                        true => &mut s.weight_pairs[reader * part_len / 2..][..part_len / 2],
                        false => &mut [][..],
                    };
                    attention_bf16::weights(scores, lo, seen, max, native, pairs)
                } else {
                    exp_shifted_in_place(&mut scores[lo..seen], max)
                };
                partial[..2].copy_from_slice(&[max, sum]);
            }
        }
        let mut b = blocks.start;
        while b < blocks.end {
            // A prompt's value pass takes a run of blocks that every row sees whole at once:
            // each (row, head)'s sums then stay in registers across the run instead of going
            // through memory after every block.
            let run = match bf16 {
                true => (b..blocks.end)
                    .take_while(|&c| seen_whole(c))
                    .count()
                    .clamp(1, VALUE_RUN),
                false => 1,
            };
            let whole = bf16 && seen_whole(b);
            if bf16 {
                s.wide.resize(run * bs * d, 0.0);
                if native {
                    s.pairs.resize(run * bs * d / 2, 0);
                }
            }
            for (i, c) in (b..b + run).enumerate() {
                let (_, values) = pool.block(task.layer, task.block_table[c], task.kv_head);
                let ahead = to_prefetch(c, 1, blocks.start).take_while(|&a| a < blocks.end);
                for (_, values) in ahead.filter_map(block_at) {
                    prefetch(values, Cache::L1);
                }
                // The next partition's keys, which its scores read next.
                if p + 1 < parts.end {
                    if let Some((keys, _)) = block_at(c + PART_BLOCKS) {
                        prefetch(keys, Cache::L2);
                    }
                }
                assert_eq!(
                    values.values(),
                    bs * d,
                    "a block holds block_size × head_dim values"
                );
                if bf16 {
                    let written = (last_pos + 1).saturating_sub(c * bs);
                    let wide = &mut s.wide[i * bs * d..][..bs * d];
                    // SAFETY: our caller vouches for `L`'s features.
                    unsafe { widen_values::<L>(values, wide) };
                    let pairs = match native {
                        true => &mut s.pairs[i * bs * d / 2..][..bs * d / 2],
                        false => &mut [][..],
                    };
                    attention_bf16::round_values(wide, d, written, native, pairs);
                }
            }
            let (_, values) = pool.block(task.layer, task.block_table[b], task.kv_head);
            let at = (b - p * PART_BLOCKS) * bs;
            let rows = first_row(b)..end_row(b);
            let wide = rows.len() * g >= WIDEN_ONCE_READERS && !bf16;
            if wide {
                s.wide.resize(bs * d, 0.0);
                // SAFETY: our caller vouches for `L`'s features.
                unsafe { widen_values::<L>(values, &mut s.wide) };
            }
            let span = |row: usize| {
                let skip = row_lo(row).saturating_sub(b * bs);
                (skip, visible(b, row) - skip)
            };
            if bf16 {
                // Consecutive rows that sum over the same slot pairs go in one call.
                let pairs_of = |row: usize| match whole {
                    true => 0..run * bs / 2,
                    false => {
                        let (skip, n) = span(row);
                        attention_bf16::slot_pairs(skip, n)
                    }
                };
                let mut row = rows.start;
                while row < rows.end {
                    let pairs = pairs_of(row);
                    let same = 1
                        + (row + 1..rows.end)
                            .take_while(|&r| pairs_of(r) == pairs)
                            .count();
                    let sums = PairedSums {
                        out: &mut s.partials[(row * g * np + pi) * plen + 2..],
                        out_stride: np * plen,
                        readers: same * g,
                        pairs,
                        d,
                    };
                    let fma = FmaValues {
                        weights: &s.scores[row * g * part_len + at..],
                        stride: part_len,
                        values: &s.wide,
                        d,
                    };
                    let pairs = native.then(|| {
                        let weights = &s.weight_pairs[(row * g * part_len + at) / 2..];
                        (weights, &s.pairs[..])
                    });
                    // SAFETY: the weights of every (row, head) are masked and rounded (and
                    // paired where `native`) and the run's values rounded (and paired); the
                    // caller vouches for `L`'s features, and for AVX-512 BF16 where `native`.
                    unsafe { sums.run_either(&fma, L::ACCUMULATORS, pairs) };
                    row += same;
                }
                b += run;
                continue;
            }
            // Read in place: half floats, or int8 times their scale (widened into
            // `s.scales`, `[slot][group]`).
            let (halves, quants) = match values {
                KvBlock::F16(h) => (h, &[][..]),
                KvBlock::Q8_0 { quants, scales } => {
                    if !wide {
                        // SAFETY: our caller vouches for `L`'s features.
                        unsafe { widened_scales::<L>(scales, &mut s.scales) };
                    }
                    (&[][..], quants)
                }
            };
            let (int8_values, groups) = (!quants.is_empty(), d / Q8_GROUP);
            // Consecutive rows that read the same keys of the block (every row, off the
            // diagonal and outside windows) go in one call, which takes their heads several at
            // a time: each value vector is then loaded once for all of them.
            let mut row = rows.start;
            while row < rows.end {
                let (skip, n) = span(row);
                let same = 1
                    + (row + 1..rows.end)
                        .take_while(|&r| span(r) == (skip, n))
                        .count();
                // Reader `k` of the call is head `k % g` of row `row + k / g`: the partials and
                // the scores of a row's heads follow one another, so one stride steps through
                // all of them.
                let sums = WeightedSums {
                    out: &mut s.partials[(row * g * np + pi) * plen + 2..],
                    out_stride: np * plen,
                    weights: &s.scores[row * g * part_len + at + skip..],
                    weights_stride: part_len,
                    heads: same * g,
                    n,
                    d,
                };
                // SAFETY: `value16` is called with `j < n` and `c < d / 16`, so it reads
                // inside row `skip + j < bs` of the block: `values` (asserted) or `s.wide`
                // when widened, `bs * d` long; our caller vouches for `L`'s features.
                unsafe {
                    if wide {
                        sums.run::<L>(
                            #[inline(always)]
                            |j, c| read16(s.wide.as_ptr().add((skip + j) * d + c * LANES)),
                        )
                    } else if int8_values {
                        let scales = s.scales.as_ptr();
                        sums.run::<L>(
                            #[inline(always)]
                            |j, c| {
                                let at = (skip + j) * d + c * LANES;
                                let scale = *scales.add((skip + j) * groups + c * LANES / Q8_GROUP);
                                dequantize16::<L>(quants.as_ptr().add(at), [scale; LANES].as_ptr())
                            },
                        )
                    } else {
                        sums.run::<L>(
                            #[inline(always)]
                            |j, c| {
                                L::widen16(
                                    &*(halves.as_ptr().add((skip + j) * d + c * LANES)
                                        as *const [u16; LANES]),
                                )
                            },
                        )
                    }
                }
                row += same;
            }
            b += 1;
        }
    }
    for row in 0..task.rows {
        for head in 0..g {
            let partials = &s.partials[(row * g + head) * np * plen..][..np * plen];
            if task.split {
                // SAFETY: this task's partitions' entries of the (row, head)'s partial array,
                // which the caller vouches for; other tasks write only other partitions'
                // entries, and the slice is dropped before the next one is made.
                let mine = unsafe {
                    let first = out(row, task.first_head + head).wrapping_add(parts.start * plen);
                    std::slice::from_raw_parts_mut(first, np * plen)
                };
                mine.copy_from_slice(partials);
            } else {
                // SAFETY: an output vector the caller vouches for, apart from every other
                // vector, and the slice is dropped before the next one is made.
                let output =
                    unsafe { std::slice::from_raw_parts_mut(out(row, task.first_head + head), d) };
                combine(partials, output);
            }
        }
    }
}

/// The blocks to prefetch when a pass that started at block `start` computes blocks
/// `b..b + n`: those [`PREFETCH_AHEAD`] further on, and at the pass's start also the ones
/// before them, which no earlier step asked for.
fn to_prefetch(b: usize, n: usize, start: usize) -> std::ops::Range<usize> {
    let first = if b == start { b } else { b + PREFETCH_AHEAD };
    first..b + n + PREFETCH_AHEAD
}

/// Where a prefetch puts its lines: the first-level cache for the blocks computed next, the
/// second for those the other pass of the partition reads (32 KB of keys or values a
/// partition, which the first level could not hold beside the blocks streaming through it).
#[derive(Clone, Copy)]
enum Cache {
    L1,
    L2,
}

/// Asks the cache for `data` (a coming KV block's keys or values) while the current block is
/// computed ([`PREFETCH_AHEAD`]).
#[inline(always)]
fn prefetch(data: KvBlock, to: Cache) {
    let (start, len) = data.bytes();
    #[cfg(target_arch = "x86_64")]
    for line in (0..len).step_by(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let at = start.wrapping_add(line) as *const i8;
        // SAFETY: a prefetch of an address inside the block; it reads nothing the program sees.
        unsafe {
            match to {
                Cache::L1 => _mm_prefetch::<_MM_HINT_T0>(at),
                Cache::L2 => _mm_prefetch::<_MM_HINT_T1>(at),
            }
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len, to);
}

/// The largest of `xs` (NaNs ignored, -∞ if empty), taken in 16 lanes so that the compiler
/// vectorizes it: `f32::max` folded in order stays scalar. The maximum of a set does not
/// depend on the order it is taken in, so the bits are those of the fold.
#[inline(always)]
fn max_of(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (l, &x) in lanes.iter_mut().zip(chunk) {
            *l = if x > *l { x } else { *l };
        }
    }
    for (l, &x) in lanes.iter_mut().zip(chunks.remainder()) {
        *l = if x > *l { x } else { *l };
    }
    lanes.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x))
}

/// Replaces each `x` with `e^(x - max)` and returns their sum. Written so the compiler
/// vectorizes it (16 lanes at a time, a polynomial instead of a libm call per score): the
/// softmax was a third of attention's time with scalar `exp`. The sum is taken in 16 lanes,
/// then across them in a fixed order, so it depends only on the row's length. (A prompt's
/// rows, in bf16, take [`attention_bf16::weights`].)
#[inline(always)]
fn exp_shifted_in_place(xs: &mut [f32], max: f32) -> f32 {
    let mut lanes = [0f32; LANES];
    let mut chunks = xs.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for (x, l) in chunk.iter_mut().zip(lanes.iter_mut()) {
            *x = exp_approx(*x - max);
            *l += *x;
        }
    }
    for (x, l) in chunks.into_remainder().iter_mut().zip(lanes.iter_mut()) {
        *x = exp_approx(*x - max);
        *l += *x;
    }
    lanes.iter().sum()
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
