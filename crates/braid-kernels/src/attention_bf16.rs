//! A prompt's attention in bf16: queries, keys, softmax weights and values rounded to bf16,
//! each product exact and summed in f32. Reading a long prompt is mostly attention (two thirds
//! of a 4,000-token prompt's time on an AMD EPYC Zen 4), and its f32 multiply-adds already ran
//! at 60% of that CPU's peak; AVX-512 BF16's `vdpbf16ps` does twice the products of an f32 FMA
//! per instruction there.
//!
//! Only rows at prompt positions take this path ([`crate::attention::GroupTask::bf16`]):
//! generated rows stay in f32, where a decoding row's few readers per block could not repay
//! the rounding. The choice depends on a row's position and its request alone, so a row gets
//! the same bits however it is chunked or batched.
//!
//! Every path gives the same bits, as in [`crate::bf16`]: `vdpbf16ps` adds the odd element's
//! product and then the even one's into each f32 lane, rounding after each, and a product of
//! two bf16 values is exact in f32; so the sums are defined in that order (for scores over
//! pairs of dimensions, for values over pairs of key slots), and CPUs without the instruction
//! run the same FMAs on the rounded values. Rounding is [`crate::bf16::to_bf16`]'s, which
//! flushes subnormals, so the instruction's flushing of subnormal inputs never meets one.

use crate::attention_tiles::{
    queries_together, read16, score_tiles, value_tile, value_tiles, weight_blocks, LANES,
};
use crate::exponential::exp2_for_bf16;
use crate::Kernel;
use std::f32::consts::LOG2_E;

/// Whether bf16 attention multiplies with `vdpbf16ps` under `kernel`: where the kernel runs on
/// AVX-512 and the CPU has AVX-512 BF16, as [`crate::bf16::Bf16Path`] decides; otherwise as
/// f32 FMAs of the rounded values.
pub(crate) fn native(kernel: Kernel) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(
            crate::bf16::Bf16Path::for_kernel(kernel),
            crate::bf16::Bf16Path::Avx512Bf16
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kernel;
        false
    }
}

/// `x` rounded to bf16, as the f32 of the same value: [`crate::bf16::to_bf16`]'s rounding, written without
/// branches so that the compiler vectorizes it.
#[inline(always)]
pub(crate) fn round(x: f32) -> f32 {
    let bits = x.to_bits();
    let nearest = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000;
    let quiet = (bits | 0x40_0000) & 0xffff_0000;
    let zero = bits & 0x8000_0000;
    let subnormal = bits & 0x7f80_0000 == 0;
    f32::from_bits(if x.is_nan() {
        quiet
    } else if subnormal {
        zero
    } else {
        nearest
    })
}

/// Two rounded values in one word, `even` low: the instruction's operand layout.
#[inline(always)]
fn pair(even: f32, odd: f32) -> u32 {
    (even.to_bits() >> 16) | (odd.to_bits() & 0xffff_0000)
}

/// `dst` = the pairs of the rounded values `src` (`dst.len()` pairs).
#[inline(always)]
fn pairs_of(src: &[f32], dst: &mut [u32]) {
    for (d, p) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = pair(p[0], p[1]);
    }
}

/// Rounds `x` in place and, for the instruction, writes its pairs into `pairs`.
#[inline(always)]
pub(crate) fn round_vector(x: &mut [f32], native: bool, pairs: &mut Vec<u32>) {
    x.iter_mut().for_each(|v| *v = round(*v));
    if native {
        pairs.resize(x.len() / 2, 0);
        pairs_of(x, pairs);
    }
}

/// Rounds widened key blocks (`[dim][slot]`, 16 slots): for FMAs in place, for the
/// instruction into `pairs` as `[block][dim pair][slot]`.
#[inline(always)]
pub(crate) fn round_keys(wide: &mut [f32], native: bool, pairs: &mut Vec<u32>) {
    if !native {
        wide.iter_mut().for_each(|v| *v = round(*v));
        return;
    }
    pairs.resize(wide.len() / 2, 0);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `native` is only set on CPUs with AVX-512 BF16; the sizes are the function's.
    unsafe {
        crate::attention_bf16_native::key_pairs(wide, pairs)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("the instruction is x86's")
}

/// Rounds a widened value block (`[slot][dim]`, 16 slots), zeroing the slots from `written`
/// on (positions after the task's last row, which may hold another sequence's stale values:
/// a weight of zero times a stale infinity would be NaN): for FMAs in place, for the
/// instruction into `pairs` (8 pairs of `d`) as `[slot pair][dim]`.
#[inline(always)]
pub(crate) fn round_values(
    wide: &mut [f32],
    d: usize,
    written: usize,
    native: bool,
    pairs: &mut [u32],
) {
    let written = written.min(LANES);
    if !native {
        let (kept, stale) = wide.split_at_mut(written * d);
        kept.iter_mut().for_each(|v| *v = round(*v));
        stale.fill(0.0);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `native` is only set on CPUs with AVX-512 BF16; a block of 16 slots of `d`.
    unsafe {
        crate::attention_bf16_native::value_pairs(wide, d, written, pairs)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = pairs;
        unreachable!("the instruction is x86's")
    }
}

/// The slot pairs a row seeing slots `skip..skip + n` of a block sums over.
#[inline(always)]
pub(crate) fn slot_pairs(skip: usize, n: usize) -> std::ops::Range<usize> {
    skip / 2..(skip + n).div_ceil(2)
}

/// The scores of queries against a run of `NB` key blocks, `QN` queries at a time.
pub(crate) trait ScoreTile {
    /// Sums for queries `first..first + QN`, from zero, over the dimension pairs in order.
    ///
    /// # Safety
    ///
    /// Those queries and the `NB` blocks must lie inside the tile's buffers, and the CPU must
    /// run the tile's instructions.
    unsafe fn tile<const NB: usize, const QN: usize>(
        &self,
        first: usize,
    ) -> [[[f32; LANES]; NB]; QN];
}

/// As f32 FMAs: queries rounded (`[query][dim]`) and key blocks rounded (`[block][dim][slot]`).
pub(crate) struct FmaScores<'a> {
    pub(crate) queries: &'a [f32],
    pub(crate) keys: &'a [f32],
    pub(crate) d: usize,
}

impl ScoreTile for FmaScores<'_> {
    #[inline(always)]
    unsafe fn tile<const NB: usize, const QN: usize>(
        &self,
        first: usize,
    ) -> [[[f32; LANES]; NB]; QN] {
        let d = self.d;
        let (q, k) = (self.queries.as_ptr(), self.keys.as_ptr());
        let mut acc = [[[0f32; LANES]; NB]; QN];
        for p in 0..d / 2 {
            // SAFETY: blocks below `NB` of `d × 16` keys and dimensions below `d` (our caller's
            // promise).
            let odd: [[f32; LANES]; NB] =
                std::array::from_fn(|b| unsafe { read16(k.add((b * d + 2 * p + 1) * LANES)) });
            // SAFETY: as above.
            let even: [[f32; LANES]; NB] =
                std::array::from_fn(|b| unsafe { read16(k.add((b * d + 2 * p) * LANES)) });
            for (i, acc) in acc.iter_mut().enumerate() {
                // SAFETY: query `first + i` and dimension `2p + 1 < d` (our caller's promise).
                let (qe, qo) = unsafe {
                    let at = q.add((first + i) * d + 2 * p);
                    (*at, *at.add(1))
                };
                for ((acc, odd), even) in acc.iter_mut().zip(&odd).zip(&even) {
                    for ((a, o), e) in acc.iter_mut().zip(odd).zip(even) {
                        *a = e.mul_add(qe, o.mul_add(qo, *a));
                    }
                }
            }
        }
        acc
    }
}

/// With `vdpbf16ps`: query pairs (`[query][pair]`) and key pairs (`[block][pair][slot]`).
#[cfg(target_arch = "x86_64")]
pub(crate) struct NativeScores<'a> {
    pub(crate) queries: &'a [u32],
    pub(crate) keys: &'a [u32],
    pub(crate) d: usize,
}

#[cfg(target_arch = "x86_64")]
impl ScoreTile for NativeScores<'_> {
    #[inline(always)]
    unsafe fn tile<const NB: usize, const QN: usize>(
        &self,
        first: usize,
    ) -> [[[f32; LANES]; NB]; QN] {
        use std::arch::x86_64::*;
        let kp = self.d / 2;
        let (q, k) = (self.queries.as_ptr(), self.keys.as_ptr());
        // SAFETY: the caller runs this inside an AVX-512 BF16 entry point and vouches for the
        // buffers: blocks below `NB` of `kp × 16` pairs and queries of `kp` pairs.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); NB]; QN];
            for p in 0..kp {
                let kv: [__m512bh; NB] = std::array::from_fn(|b| {
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                        k.add((b * kp + p) * LANES).cast(),
                    ))
                });
                for (i, acc) in acc.iter_mut().enumerate() {
                    let qb = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                        *q.add((first + i) * kp + p) as i32,
                    ));
                    for (a, kv) in acc.iter_mut().zip(&kv) {
                        *a = _mm512_dpbf16_ps(*a, *kv, qb);
                    }
                }
            }
            std::mem::transmute_copy(&acc)
        }
    }
}

/// Scores `readers` queries (from `first`) against a run of `nb` blocks into `scores`: query
/// `first + i`'s 16·`nb` scores, times `scale`, go to `scores[(first + i) * stride..]`.
pub(crate) struct ScoreRun<'a> {
    pub(crate) first: usize,
    pub(crate) readers: usize,
    pub(crate) nb: usize,
    pub(crate) accumulators: usize,
    pub(crate) scale: f32,
    pub(crate) scores: &'a mut [f32],
    pub(crate) stride: usize,
}

impl ScoreRun<'_> {
    /// # Safety
    ///
    /// `tile` must hold the queries `first..first + readers` and `nb` blocks, and the CPU must
    /// run its instructions; `scores` must hold each query's scores as described.
    #[inline(always)]
    pub(crate) unsafe fn run<T: ScoreTile>(self, tile: &T) {
        let mut i = 0;
        while i < self.readers {
            // One register per query and block, where `scores16` keeps two.
            let qn = queries_together(self.readers - i, self.nb, 2 * self.accumulators);
            let first = self.first + i;
            macro_rules! score {
                ($(($nb:literal, $qn:literal)),*) => {
                    match (self.nb, qn) {
                        $(($nb, $qn) => {
                            // SAFETY: our caller's promise.
                            let sums = unsafe { tile.tile::<$nb, $qn>(first) };
                            for (k, sums) in sums.iter().enumerate() {
                                let dst = &mut self.scores[(first + k) * self.stride..];
                                for (o, x) in dst.iter_mut().zip(sums.as_flattened()) {
                                    *o = x * self.scale;
                                }
                            }
                        })*
                        _ => unreachable!("a block run and query group the tiles have"),
                    }
                };
            }
            score_tiles!(score);
            i += qn;
        }
    }

    /// [`ScoreRun::run`] with `vdpbf16ps`.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512 BF16; otherwise as for [`ScoreRun::run`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
    pub(crate) unsafe fn run_native(self, tile: &NativeScores) {
        // SAFETY: our caller's promise.
        unsafe { self.run(tile) }
    }

    /// [`ScoreRun::run_native`] on `native`'s (query pairs, key pairs) where given, else
    /// [`ScoreRun::run`] on `fma`.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512 BF16 where `native` is given; otherwise as for
    /// [`ScoreRun::run`], for the tile that runs.
    #[inline(always)]
    pub(crate) unsafe fn run_either(self, fma: &FmaScores, native: Option<(&[u32], &[u32])>) {
        #[cfg(target_arch = "x86_64")]
        if let Some((queries, keys)) = native {
            let tile = NativeScores {
                queries,
                keys,
                d: fma.d,
            };
            // SAFETY: our caller's promise.
            return unsafe { self.run_native(&tile) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = native;
        // SAFETY: our caller's promise.
        unsafe { self.run(fma) }
    }
}

/// The value pass of one block for consecutive readers (a row's heads, then the next row's):
/// reader `r`'s `d` sums at `out[r * out_stride..]` gain its weights times the block's values
/// over slot pairs `pairs`, the odd slot's product and then the even one's. Several readers
/// and 16-float pieces are summed at once, as in [`crate::attention_tiles::WeightedSums`].
pub(crate) struct PairedSums<'a> {
    pub(crate) out: &'a mut [f32],
    pub(crate) out_stride: usize,
    pub(crate) readers: usize,
    pub(crate) pairs: std::ops::Range<usize>,
    pub(crate) d: usize,
}

/// One block's weights and values, as one way of multiplying reads them.
pub(crate) trait ValueTile {
    /// Adds readers `r0..r0 + H`'s products over `pairs` to their sums' pieces `c0..c0 + W`,
    /// whose first float `acc(h, i)` points at.
    ///
    /// # Safety
    ///
    /// Those readers, pieces and pairs must lie inside the buffers, and the CPU must run the
    /// tile's instructions.
    unsafe fn tile<const W: usize, const H: usize>(
        &self,
        acc: impl Fn(usize, usize) -> *mut f32,
        r0: usize,
        c0: usize,
        pairs: std::ops::Range<usize>,
    );
}

/// As f32 FMAs: each reader's 16 rounded weights for the block (`weights[r * stride..]`, zero
/// for slots it does not see) and the rounded values (`[slot][dim]`).
pub(crate) struct FmaValues<'a> {
    pub(crate) weights: &'a [f32],
    pub(crate) stride: usize,
    pub(crate) values: &'a [f32],
    pub(crate) d: usize,
}

impl ValueTile for FmaValues<'_> {
    #[inline(always)]
    unsafe fn tile<const W: usize, const H: usize>(
        &self,
        acc: impl Fn(usize, usize) -> *mut f32,
        r0: usize,
        c0: usize,
        pairs: std::ops::Range<usize>,
    ) {
        let (w, v, d) = (self.weights.as_ptr(), self.values.as_ptr(), self.d);
        // SAFETY: inside the buffers (our caller's promise).
        unsafe {
            let mut sums: [[[f32; LANES]; W]; H] =
                std::array::from_fn(|h| std::array::from_fn(|i| read16(acc(h, i))));
            for p in pairs {
                let weights: [(f32, f32); H] = std::array::from_fn(|h| {
                    let at = w.add((r0 + h) * self.stride + 2 * p);
                    (*at, *at.add(1))
                });
                // One piece of the pair's two value rows at a time: both rows of every piece
                // at once would outgrow AVX2's sixteen registers.
                for i in 0..W {
                    let odd = read16(v.add((2 * p + 1) * d + (c0 + i) * LANES));
                    let even = read16(v.add(2 * p * d + (c0 + i) * LANES));
                    for (sums, &(we, wo)) in sums.iter_mut().zip(&weights) {
                        for ((s, o), e) in sums[i].iter_mut().zip(&odd).zip(&even) {
                            *s = we.mul_add(*e, wo.mul_add(*o, *s));
                        }
                    }
                }
            }
            for (h, sums) in sums.iter().enumerate() {
                for (i, s) in sums.iter().enumerate() {
                    std::ptr::write_unaligned(acc(h, i) as *mut [f32; LANES], *s);
                }
            }
        }
    }
}

/// With `vdpbf16ps`: each reader's 8 weight pairs for the block (`weights[r * stride..]`) and
/// the values' pairs (`[slot pair][dim]`).
#[cfg(target_arch = "x86_64")]
pub(crate) struct NativeValues<'a> {
    pub(crate) weights: &'a [u32],
    pub(crate) stride: usize,
    pub(crate) values: &'a [u32],
    pub(crate) d: usize,
}

#[cfg(target_arch = "x86_64")]
impl ValueTile for NativeValues<'_> {
    #[inline(always)]
    unsafe fn tile<const W: usize, const H: usize>(
        &self,
        acc: impl Fn(usize, usize) -> *mut f32,
        r0: usize,
        c0: usize,
        pairs: std::ops::Range<usize>,
    ) {
        use std::arch::x86_64::*;
        let (w, v, d) = (self.weights.as_ptr(), self.values.as_ptr(), self.d);
        // SAFETY: inside the buffers, on a CPU with AVX-512 BF16 (our caller's promise).
        unsafe {
            let mut sums: [[__m512; W]; H] = std::array::from_fn(|h| {
                std::array::from_fn(|i| _mm512_loadu_ps(acc(h, i).cast_const()))
            });
            for p in pairs {
                let vp: [__m512bh; W] = std::array::from_fn(|i| {
                    std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                        v.add(p * d + (c0 + i) * LANES).cast(),
                    ))
                });
                for (h, sums) in sums.iter_mut().enumerate() {
                    let wb = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                        *w.add((r0 + h) * self.stride + p) as i32,
                    ));
                    for (s, vp) in sums.iter_mut().zip(&vp) {
                        *s = _mm512_dpbf16_ps(*s, *vp, wb);
                    }
                }
            }
            for (h, sums) in sums.iter().enumerate() {
                for (i, s) in sums.iter().enumerate() {
                    _mm512_storeu_ps(acc(h, i), *s);
                }
            }
        }
    }
}

impl PairedSums<'_> {
    /// # Safety
    ///
    /// `tile` must hold the readers' weights over `pairs` and the block's values, and the CPU
    /// must run its instructions.
    #[inline(always)]
    pub(crate) unsafe fn run<T: ValueTile>(self, tile: &T, accumulators: usize) {
        let d = self.d;
        assert!(d.is_multiple_of(LANES) && self.readers > 0);
        assert!(self.out.len() >= (self.readers - 1) * self.out_stride + d);
        let (out, stride) = (self.out.as_mut_ptr(), self.out_stride);
        let chunks = d / LANES;
        let mut c = 0;
        while c < chunks {
            let (width, per) = value_tile(chunks - c, accumulators);
            let mut r = 0;
            while r < self.readers {
                let n = per.min(self.readers - r);
                let acc = |h: usize, i: usize| out.wrapping_add((r + h) * stride + (c + i) * LANES);
                let pairs = self.pairs.clone();
                macro_rules! tile {
                    ($(($w:literal, $h:literal)),*) => {
                        match (width, n) {
                            // SAFETY: readers `r..r + n` and pieces `c..c + width` lie inside
                            // `out` (asserted), the rest is our caller's promise.
                            $(($w, $h) => unsafe { tile.tile::<$w, $h>(acc, r, c, pairs) },)*
                            _ => unreachable!("tiles of 1, 2 or 4 pieces and 1 to 6 readers"),
                        }
                    };
                }
                value_tiles!(tile);
                r += n;
            }
            c += width;
        }
    }

    /// [`PairedSums::run`] with `vdpbf16ps`.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512 BF16; otherwise as for [`PairedSums::run`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
    pub(crate) unsafe fn run_native(self, tile: &NativeValues) {
        // SAFETY: our caller's promise.
        unsafe { self.run(tile, 24) }
    }

    /// [`PairedSums::run_native`] on `native`'s (weight pairs, value pairs) where given, the
    /// weight pairs at half `fma`'s stride, else [`PairedSums::run`] on `fma`.
    ///
    /// # Safety
    ///
    /// The CPU must have AVX-512 BF16 where `native` is given; otherwise as for
    /// [`PairedSums::run`], for the tile that runs.
    #[inline(always)]
    pub(crate) unsafe fn run_either(
        self,
        fma: &FmaValues,
        accumulators: usize,
        native: Option<(&[u32], &[u32])>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if let Some((weights, values)) = native {
            let tile = NativeValues {
                weights,
                stride: fma.stride / 2,
                values,
                d: fma.d,
            };
            // SAFETY: our caller's promise.
            return unsafe { self.run_native(&tile) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = native;
        // SAFETY: our caller's promise.
        unsafe { self.run(fma, accumulators) }
    }
}

/// A row's softmax weights over one partition (`scores`, its scores there), for the keys it
/// sees, `lo..seen`: `e^(x - max)`, computed as `2^(x·log2 e - max·log2 e)` to the precision
/// bf16 keeps ([`exp2_for_bf16`]) and rounded to bf16, and zero for the other keys of the
/// blocks it reads ([`weight_blocks`]). They replace the scores, or with the instruction go to
/// `pairs` (the same places, halved). Returns the sum of the weights before rounding (as good
/// a divisor as the rounded ones' and, with the instruction, one conversion fewer), taken in
/// 16 lanes by position in the partition and then across the lanes in order.
#[inline(always)]
pub(crate) fn weights(
    scores: &mut [f32],
    lo: usize,
    seen: usize,
    max: f32,
    native: bool,
    pairs: &mut [u32],
) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if native {
        // SAFETY: `native` is only set on CPUs with AVX-512 BF16; `pairs` holds the
        // partition's pairs.
        return unsafe { crate::attention_bf16_native::weights(scores, lo, seen, max, pairs) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (native, pairs);
    let shift = -(max * LOG2_E);
    let (first, end) = weight_blocks(lo, seen, scores.len());
    let mut lanes = [0f32; LANES];
    for (block, chunk) in scores[first..end].chunks_exact_mut(LANES).enumerate() {
        let at = first + block * LANES;
        for (j, (x, l)) in chunk.iter_mut().zip(lanes.iter_mut()).enumerate() {
            let e = exp2_for_bf16(x.mul_add(LOG2_E, shift));
            let sees = (lo..seen).contains(&(at + j));
            *x = if sees { round(e) } else { 0.0 };
            *l += if sees { e } else { 0.0 };
        }
    }
    lanes.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bf16::{bf16_to_f32, to_bf16};

    #[test]
    fn round_is_to_bf16() {
        let mut x = 0x1234_5678u32;
        let specials = [
            0,
            0x8000_0000,
            1,
            0x807f_ffff,
            0x7f80_0000,
            0x7f80_0001,
            0x7fc0_0000,
        ];
        let randoms = (0..100_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        });
        for b in specials.into_iter().chain(randoms) {
            let v = f32::from_bits(b);
            let want = bf16_to_f32(to_bf16(v));
            assert_eq!(round(v).to_bits(), want.to_bits(), "{b:#x}");
        }
    }

    /// Floats that test a rounding: random ones over a wide range, ties to even both ways,
    /// subnormals, zeros, infinities and NaN.
    #[cfg(target_arch = "x86_64")]
    fn awkward_floats(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed;
        let specials = [
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
            -(1.0 + 2f32.powi(-8)),
            1e-40,
            -1e-40,
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
        ];
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if i % 7 == 3 {
                    specials[(x as usize) % specials.len()]
                } else {
                    (x as f32 / u32::MAX as f32 - 0.5) * 2f32.powi((x % 24) as i32 - 12)
                }
            })
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_instruction_gives_the_portable_bits() {
        if !crate::cpu_has("avx512bf16") {
            eprintln!("skipped: this CPU has no AVX-512 BF16");
            return;
        }
        let pair_floats = |p: &[u32]| -> Vec<f32> {
            p.iter()
                .flat_map(|&w| [f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000)])
                .collect()
        };

        // Softmax weights: one partition's scores, some NaN, for rows that see all of it, a
        // little, or a window's end.
        let mut scores = awkward_floats(256, 7);
        scores.iter_mut().for_each(|x| *x = x.clamp(-40.0, 40.0));
        scores[40] = f32::NAN;
        for (lo, seen) in [
            (0, 256),
            (0, 1),
            (0, 17),
            (5, 200),
            (16, 32),
            (31, 33),
            (255, 256),
            (41, 120),
        ] {
            let max = scores[lo..seen]
                .iter()
                .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut portable = scores.clone();
            let want = weights(&mut portable, lo, seen, max, false, &mut []);
            let mut pairs = vec![0u32; 128];
            let got = weights(&mut scores.clone(), lo, seen, max, true, &mut pairs);
            assert!(
                same(got, want),
                "sum over {lo}..{seen}: {got} against {want}"
            );
            let (first, end) = weight_blocks(lo, seen, 256);
            let (got, want) = (
                pair_floats(&pairs[first / 2..end / 2]),
                &portable[first..end],
            );
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    same(*g, *w),
                    "weight {} over {lo}..{seen}: {g} against {w}",
                    first + i
                );
            }
        }

        // Keys, four blocks of 64 dimensions.
        let keys = awkward_floats(4 * 64 * LANES, 11);
        let mut portable = keys.clone();
        round_keys(&mut portable, false, &mut Vec::new());
        let mut pairs = Vec::new();
        round_keys(&mut keys.clone(), true, &mut pairs);
        let mut want = Vec::new();
        for dims in portable.chunks_exact(2 * LANES) {
            let (even, odd) = dims.split_at(LANES);
            want.extend(even.iter().zip(odd).map(|(&e, &o)| pair(e, o)));
        }
        assert_eq!(pairs, want, "keys");

        // Values, a block of 16 slots of 64, written up to each place a sequence can end.
        let values = awkward_floats(LANES * 64, 13);
        for written in [0, 1, 2, 7, 15, 16, 40] {
            let mut portable = values.clone();
            round_values(&mut portable, 64, written, false, &mut []);
            let mut pairs = vec![0; LANES / 2 * 64];
            round_values(&mut values.clone(), 64, written, true, &mut pairs);
            let mut want = Vec::new();
            for slots in portable.chunks_exact(2 * 64) {
                let (even, odd) = slots.split_at(64);
                want.extend(even.iter().zip(odd).map(|(&e, &o)| pair(e, o)));
            }
            assert_eq!(pairs, want, "values written to {written}");
        }
    }
}
