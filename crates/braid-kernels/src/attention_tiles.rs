//! The register-blocked products inside attention's partitions: scores of a group of queries
//! against a run of key blocks, and the softmax-weighted sums of a block's values for a group
//! of (row, head) pairs. Each is shaped so that a loaded vector feeds many multiply-adds, and
//! each keeps the order of sums a lone row and block would use, so the grouping never changes
//! the bits ([`crate::attention`] chooses the groups).

use crate::Lanes;

/// Calls `$m!` with every (blocks, queries) group the score tiles are compiled for
/// ([`most_queries`] and [`blocks_together`] choose among them): one list for each pass and
/// arithmetic that dispatches on it.
macro_rules! score_tiles {
    ($m:ident) => {
        $m!(
            (1, 1),
            (1, 2),
            (1, 3),
            (1, 4),
            (1, 5),
            (1, 6),
            (1, 7),
            (1, 8),
            (1, 9),
            (1, 10),
            (1, 11),
            (1, 12),
            (2, 1),
            (2, 2),
            (2, 3),
            (2, 4),
            (2, 5),
            (2, 6),
            (4, 1),
            (4, 2),
            (4, 3)
        )
    };
}
pub(crate) use score_tiles;

/// Calls `$m!` with every (16-float pieces, readers) tile the value passes are compiled for.
macro_rules! value_tiles {
    ($m:ident) => {
        $m!(
            (1, 1),
            (1, 2),
            (1, 3),
            (1, 4),
            (1, 5),
            (1, 6),
            (2, 1),
            (2, 2),
            (2, 3),
            (2, 4),
            (2, 5),
            (2, 6),
            (4, 1),
            (4, 2),
            (4, 3),
            (4, 4),
            (4, 5),
            (4, 6)
        )
    };
}
pub(crate) use value_tiles;

/// Keys scored together: one 512-bit vector of f32.
pub(crate) const LANES: usize = 16;

/// Blocks scored together at most: a lone query with four blocks of keys keeps four chains of
/// multiply-adds in flight. Eight were slower than one: their sums, partial sums and key
/// vectors outgrew the registers.
pub(crate) const MAX_RUN: usize = 4;

/// The positions of a partition whose bf16 softmax weights a row with keys `lo..seen` reads: its blocks
/// of 16 from the one holding `lo` to the one holding `seen - 1`, within `len`.
#[inline(always)]
pub(crate) fn weight_blocks(lo: usize, seen: usize, len: usize) -> (usize, usize) {
    (lo / LANES * LANES, seen.next_multiple_of(LANES).min(len))
}

/// The most queries [`scores16`] takes at once against `nb` blocks (the groups it is compiled
/// for).
pub(crate) fn most_queries(nb: usize) -> usize {
    match nb {
        1 => 12,
        2 => 6,
        _ => 3,
    }
}

/// How many consecutive blocks to score together for `readers` queries, with registers for
/// `accumulators` 16-float sums: [`scores16`] keeps two per query and block (the partial sum of
/// a lane and the total). More blocks for few queries, so that enough chains overlap; two for
/// many, so that each broadcast query value meets two key vectors.
pub(crate) fn blocks_together(readers: usize, accumulators: usize) -> usize {
    let products = accumulators / 2;
    [MAX_RUN, 2, 1]
        .into_iter()
        .find(|&nb| {
            nb * readers.min(most_queries(nb)) <= products
                && (nb <= 2 || readers <= most_queries(nb))
        })
        .unwrap_or(1)
}

/// The value passes' tile for `left` 16-float pieces of the sums still to do, with registers
/// for `accumulators` of them: (pieces, readers) of [`value_tiles`]. Four pieces at once where
/// there are four, and as many readers as the rest of the registers hold, at most six.
pub(crate) fn value_tile(left: usize, accumulators: usize) -> (usize, usize) {
    let width = match left {
        1 => 1,
        2 | 3 => 2,
        _ => 4,
    };
    (width, (accumulators / width).clamp(1, 6))
}

/// The largest power of two at most `n` (`n >= 1`).
pub(crate) fn prev_power_of_two(n: usize) -> usize {
    1 << n.ilog2()
}

/// How many of the `left` remaining queries to score at once against `nb` blocks.
pub(crate) fn queries_together(left: usize, nb: usize, accumulators: usize) -> usize {
    left.min(most_queries(nb)).min(accumulators / 2 / nb).max(1)
}

/// `q · k` for each of `QN` query vectors and the 16 keys of each of `NB` blocks, whose keys
/// are stored transposed: `key16(block, dim)` gives one block's 16 keys' values in dimension
/// `dim`. Each score is the sum, in lane order, of 16 partial sums that each accumulate every
/// 16th dimension (a block needs `head_dim` to be a multiple of 16): the order a lone query
/// and block would use, so the bits do not depend on the group. A partial sum is finished
/// before the next one starts, so a (query, block) needs two registers rather than sixteen.
/// Each key vector is loaded once for every query of the group, and each query value is
/// broadcast once for every block.
///
/// # Safety
///
/// `key16` must be safe to call with every block below `NB` and every `dim` below the
/// queries' length.
#[inline(always)]
pub(crate) unsafe fn scores16<const NB: usize, const QN: usize>(
    q: [&[f32]; QN],
    key16: impl Fn(usize, usize) -> [f32; LANES],
) -> [[[f32; LANES]; NB]; QN] {
    let d = q[0].len();
    assert!(d.is_multiple_of(LANES) && q.iter().all(|q| q.len() == d));
    let mut out = [[[0f32; LANES]; NB]; QN];
    for lane in 0..LANES {
        let mut partial = [[[0f32; LANES]; NB]; QN];
        for c in 0..d / LANES {
            // A loop, not `from_fn`: for some shapes the compiler kept `from_fn`'s closure out
            // of line, where the keys' widening was compiled without the entry point's
            // features and each of its instructions became a call.
            let mut k = [[0f32; LANES]; NB];
            for (b, k) in k.iter_mut().enumerate() {
                *k = key16(b, c * LANES + lane);
            }
            for (partial, qv) in partial.iter_mut().zip(&q) {
                // SAFETY: `c * 16 + lane < d`, the query's length (asserted).
                let x = unsafe { *qv.get_unchecked(c * LANES + lane) };
                for (acc, k) in partial.iter_mut().zip(&k) {
                    for (a, k) in acc.iter_mut().zip(k) {
                        *a = x.mul_add(*k, *a);
                    }
                }
            }
        }
        for (out, partial) in out.iter_mut().zip(&partial) {
            for (o, p) in out.iter_mut().zip(partial) {
                for (o, p) in o.iter_mut().zip(p) {
                    *o += p;
                }
            }
        }
    }
    out
}

/// The 16 floats at `p`.
///
/// # Safety
///
/// `p` must be valid for reads of 16 floats.
#[inline(always)]
pub(crate) unsafe fn read16(p: *const f32) -> [f32; LANES] {
    // SAFETY: our caller's promise.
    unsafe { std::ptr::read_unaligned(p as *const [f32; LANES]) }
}

/// The value pass of one row of a block for every query head of the group: for head `h`,
/// `out[h·out_stride..][..d] += Σ_j weights[h·weights_stride + j] · value_j` over `j < n`, in
/// order of `j` for every element (the order a lone head and row would use). Several heads and
/// 16-float pieces of the row are summed at once, so each value is widened once for all the
/// heads and the multiply-adds of different accumulators overlap instead of each waiting on
/// the one before.
pub(crate) struct WeightedSums<'a> {
    pub(crate) out: &'a mut [f32],
    pub(crate) out_stride: usize,
    pub(crate) weights: &'a [f32],
    pub(crate) weights_stride: usize,
    pub(crate) heads: usize,
    pub(crate) n: usize,
    pub(crate) d: usize,
}

impl WeightedSums<'_> {
    /// `value16(j, c)` gives floats `16c..16c + 16` of value row `j`.
    ///
    /// # Safety
    ///
    /// The CPU must have `L`'s features, and `value16` must be safe to call with every
    /// `j < n` and `c < d / 16`.
    #[inline(always)]
    pub(crate) unsafe fn run<L: Lanes>(mut self, value16: impl Fn(usize, usize) -> [f32; LANES]) {
        let last_head = self.heads - 1;
        assert!(self.out.len() >= last_head * self.out_stride + self.d);
        assert!(self.weights.len() >= last_head * self.weights_stride + self.n);
        let chunks = self.d / LANES;
        let mut c = 0;
        while c < chunks {
            let (width, per) = value_tile(chunks - c, L::ACCUMULATORS);
            let mut h = 0;
            while h < self.heads {
                let heads = per.min(self.heads - h);
                macro_rules! tile {
                    ($(($w:literal, $h:literal)),*) => {
                        match (width, heads) {
                            // SAFETY: heads `h..h + heads` and pieces `c..c + width` lie
                            // inside `out` and `weights` (asserted above); `value16` and
                            // `L` are our caller's promise.
                            $(($w, $h) => unsafe { self.tile::<$w, $h>(h, c, &value16) },)*
                            _ => unreachable!("tiles of 1, 2 or 4 pieces and 1 to 6 heads"),
                        }
                    };
                }
                value_tiles!(tile);
                h += heads;
            }
            c += width;
        }
    }

    /// Heads `h0..h0 + H`, pieces `c0..c0 + W`, with their `H × W` accumulators in registers.
    ///
    /// # Safety
    ///
    /// Those heads and pieces must lie inside `out` and `weights`, and `value16` must be safe
    /// to call with every `j < n` and every piece.
    #[inline(always)]
    unsafe fn tile<const W: usize, const H: usize>(
        &mut self,
        h0: usize,
        c0: usize,
        value16: &impl Fn(usize, usize) -> [f32; LANES],
    ) {
        let (out_stride, base) = (self.out_stride, self.out.as_mut_ptr());
        let out = |h: usize, i: usize| base.wrapping_add((h0 + h) * out_stride + (c0 + i) * LANES);
        let weights = self.weights.as_ptr().wrapping_add(h0 * self.weights_stride);
        // SAFETY: inside `out` (our caller's promise).
        let mut acc: [[[f32; LANES]; W]; H] =
            std::array::from_fn(|h| std::array::from_fn(|i| unsafe { read16(out(h, i)) }));
        for j in 0..self.n {
            // A loop, not `from_fn`: as for the keys in `scores16`.
            let mut v = [[0f32; LANES]; W];
            for (i, v) in v.iter_mut().enumerate() {
                *v = value16(j, c0 + i);
            }
            for (h, acc) in acc.iter_mut().enumerate() {
                // SAFETY: `j < n`, inside head `h0 + h`'s weights (our caller's promise).
                let wt = unsafe { *weights.add(h * self.weights_stride + j) };
                for (a, v) in acc.iter_mut().zip(&v) {
                    for (a, x) in a.iter_mut().zip(v) {
                        *a = wt.mul_add(*x, *a);
                    }
                }
            }
        }
        for (h, acc) in acc.iter().enumerate() {
            for (i, a) in acc.iter().enumerate() {
                // SAFETY: inside `out`, which `self` borrows mutably (our caller's promise).
                unsafe { std::ptr::write_unaligned(out(h, i) as *mut [f32; LANES], *a) };
            }
        }
    }
}
