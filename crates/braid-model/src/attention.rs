//! Causal attention of one sequence's new rows against that sequence's own cached keys and
//! values. Sequences in a step never see each other: each reads only the blocks of its own
//! block table, which is what lets one forward carry many unrelated requests.

use crate::kv_pool::KvPool;

/// One (sequence, query head) unit of work.
pub struct HeadTask<'a> {
    pub layer: usize,
    pub block_table: &'a [u32],
    /// Position of the first new row.
    pub start: usize,
    pub rows: usize,
    pub head: usize,
    pub kv_head: usize,
}

/// Computes `rows` outputs of one head. `q(i)` is query row i of this head; `out(i)` receives it.
pub fn attend_head(
    pool: &KvPool,
    task: &HeadTask,
    head_dim: usize,
    scores: &mut Vec<f32>,
    q: impl Fn(usize) -> *const f32,
    out: impl Fn(usize) -> *mut f32,
) {
    let bs = pool.block_size();
    let scale = 1.0 / (head_dim as f32).sqrt();
    for i in 0..task.rows {
        let pos = task.start + i;
        // SAFETY: the caller hands out disjoint, live rows of `head_dim` floats.
        let q = unsafe { std::slice::from_raw_parts(q(i), head_dim) };
        let out = unsafe { std::slice::from_raw_parts_mut(out(i), head_dim) };
        let n = pos + 1;
        scores.clear();
        for b in 0..n.div_ceil(bs) {
            let (keys, _) = pool.block(task.layer, task.block_table[b], task.kv_head);
            let in_block = bs.min(n - b * bs);
            for slot in 0..in_block {
                scores.push(dot(q, &keys[slot * head_dim..(slot + 1) * head_dim]) * scale);
            }
        }
        let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        let mut sum = 0.0;
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        let inv = 1.0 / sum;
        out.fill(0.0);
        for b in 0..n.div_ceil(bs) {
            let (_, values) = pool.block(task.layer, task.block_table[b], task.kv_head);
            let in_block = bs.min(n - b * bs);
            for slot in 0..in_block {
                let w = scores[b * bs + slot] * inv;
                axpy(out, w, &values[slot * head_dim..(slot + 1) * head_dim]);
            }
        }
    }
}

/// Dot product with 16 independent partial sums, so the compiler can keep it in vector registers.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[inline]
fn axpy(out: &mut [f32], w: f32, x: &[f32]) {
    for (o, v) in out.iter_mut().zip(x) {
        *o = w.mul_add(*v, *o);
    }
}
