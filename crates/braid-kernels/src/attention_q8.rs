//! Scores of q8_0 keys from int8 dot products, as llama.cpp scores its q8_0 cache: the query is
//! rounded to q8_0 too (an f32 scale per 32 values), and each group of 32 dimensions is one
//! exact integer sum times the two scales.
//!
//! Sixteen sequences decoding at 4,096 tokens spend most of a step on attention, and with the
//! q8_0 cache the keys' half of it was arithmetic, not reading: every int8 widened to f32 and
//! multiplied by its scale before its multiply-add. `vpdpbusd` multiplies and adds four int8
//! pairs into each of 16 lanes in one instruction, so a group of 32 dimensions of 16 keys is
//! eight of them per query (on AVX2, `vpmaddubsw` and `vpmaddwd` pairs), then one conversion
//! and two products for its scales. The keys are stored in quads of dimensions for it
//! ([`crate::kv_pool::q8_key_index`]).
//!
//! Only rows scored in f32 take this path (generated rows, and prompts whose log-probabilities
//! are asked for); a prompt's bf16 rows widen the keys as before. The integer sums are exact
//! and the float steps after them are the same IEEE operations in the same order on every
//! instruction set, so a row gets the same bits from every kernel and every tiling.

use crate::attention_tiles::LANES;
use crate::kv_pool::{q8_key_index, Q8_GROUP};
use crate::Lanes;

/// Queries scored against each key vector at once: each vector is loaded (and on AVX-512
/// made unsigned) once for all of them, and their sums are independent chains. More would
/// not fit AVX2's 16 registers (two accumulators each, and the keys).
pub(crate) const QUERIES_TOGETHER: usize = 4;

/// Every (row, head) query of a task rounded to q8_0: `[reader][dim]` int8, and per reader and
/// group its scale and the sum of its int8.
#[derive(Default)]
pub(crate) struct QuantizedQueries {
    quants: Vec<i8>,
    scales: Vec<f32>,
    sums: Vec<i32>,
    groups: usize,
}

impl QuantizedQueries {
    /// Rounds `readers` queries of `d` floats (`query(reader)`), replacing what was held.
    ///
    /// # Safety
    ///
    /// The CPU must have `L`'s features.
    #[inline(always)]
    pub(crate) unsafe fn fill<'q, L: Lanes>(
        &mut self,
        readers: usize,
        d: usize,
        query: impl Fn(usize) -> &'q [f32],
    ) {
        self.groups = d / Q8_GROUP;
        self.quants.resize(readers * d, 0);
        self.scales.clear();
        self.sums.clear();
        for r in 0..readers {
            let q = query(r);
            for (g, x) in q.chunks_exact(Q8_GROUP).enumerate() {
                let out: &mut [i8; Q8_GROUP] = (&mut self.quants[r * d + g * Q8_GROUP..]
                    [..Q8_GROUP])
                    .try_into()
                    .expect("a group");
                // SAFETY: our caller vouches for `L`'s features.
                let (scale, sum) =
                    unsafe { L::quantize32(x.try_into().expect("a group of 32"), out) };
                self.scales.push(scale);
                self.sums.push(sum);
            }
        }
    }

    /// Query `reader` as the floats its int8 stand for: what the scores are exact for.
    #[cfg(test)]
    pub(crate) fn dequantized(&self, reader: usize) -> Vec<f32> {
        let d = self.groups * Q8_GROUP;
        self.quants[reader * d..][..d]
            .iter()
            .enumerate()
            .map(|(i, &q)| q as f32 * self.scales[reader * self.groups + i / Q8_GROUP])
            .collect()
    }
}

/// `q · k` of readers `who` (indices into `queries`) and one block's 16 keys (`quants`, the
/// block's q8_0 keys in quads of `bs` slots; `key_scales`, their scales as f32, `[group][16]`):
/// for each group, the exact integer sum as f32 times the product of the key's and the
/// query's scales, added in group order.
///
/// # Safety
///
/// `quants` must hold `head_dim × bs` keys and `key_scales` 16 per group, for the queries'
/// `head_dim`, and the CPU must have `L`'s features.
#[inline(always)]
pub(crate) unsafe fn scores<L: Lanes, const QN: usize>(
    queries: &QuantizedQueries,
    who: [usize; QN],
    quants: &[i8],
    key_scales: &[f32],
    bs: usize,
) -> [[f32; LANES]; QN] {
    let groups = queries.groups;
    let d = groups * Q8_GROUP;
    assert!(quants.len() >= d * bs && key_scales.len() >= groups * LANES);
    let mut out = [[0f32; LANES]; QN];
    for g in 0..groups {
        // Loops rather than `from_fn`, whose closures the compiler kept out of line here (4%
        // of a decoding step's profile at 4k; no change in tokens/s could be told from noise).
        let (mut q, mut sums) = ([std::ptr::null(); QN], [0; QN]);
        for j in 0..QN {
            q[j] = queries.quants[who[j] * d + g * Q8_GROUP..][..Q8_GROUP].as_ptr();
            sums[j] = queries.sums[who[j] * groups + g];
        }
        // SAFETY: the group's 8 quads start at its first dimension and lie `4 · bs` bytes
        // apart inside `quants` (asserted), each query holds the group's 32 int8, and our
        // caller vouches for `L`'s features.
        let dots = unsafe {
            L::q8_group_dots::<QN>(
                quants.as_ptr().add(q8_key_index(g * Q8_GROUP, 0, bs)),
                4 * bs,
                q,
                sums,
            )
        };
        let ks = &key_scales[g * LANES..][..LANES];
        for ((o, dots), &r) in out.iter_mut().zip(&dots).zip(&who) {
            let qs = queries.scales[r * groups + g];
            for ((o, &dot), &k) in o.iter_mut().zip(dots).zip(ks) {
                *o += dot as f32 * (k * qs);
            }
        }
    }
    out
}
