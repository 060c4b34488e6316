//! The float loops' instruction sets: what those loops (attention, the softmax's exponential,
//! the model's row loops) need from an instruction set beyond what the compiler derives from
//! plain Rust (widening half floats from the KV cache: [`Lanes`]), and the one
//! `#[target_feature]` entry point per set that compiles them for it ([`FloatIsa`]).
//!
//! Those loops are written once, generic over [`Lanes`] and `#[inline(always)]`, as a
//! [`FloatLoops`]; inside an entry point the compiler vectorizes the same source for that
//! set's registers and fuses every `mul_add` into one instruction. The arithmetic is the same
//! IEEE operations in the same order on every path, so the results are the same bits.

use crate::f16_to_f32;

/// One instruction set's way of widening 16 half floats.
pub trait Lanes {
    /// How many 16-float accumulators a loop can keep in this set's registers beside its
    /// operands: the attention's weighted sum of values keeps several heads and dimensions
    /// in flight so that its multiply-adds do not wait on one another.
    const ACCUMULATORS: usize;

    /// The f32 values of 16 half floats, exactly.
    ///
    /// # Safety
    ///
    /// The CPU must have the instruction set's features (the caller runs inside its
    /// `#[target_feature]` entry point).
    unsafe fn widen16(bits: &[u16; 16]) -> [f32; 16];

    /// Each of 16 int8 times the float at the same place (a q8_0 KV value and its scale):
    /// exact widening, then one IEEE product, so every set gives the same bits.
    ///
    /// # Safety
    ///
    /// As for [`Lanes::widen16`].
    #[inline(always)]
    unsafe fn dequantize16(quants: &[i8; 16], scales: &[f32; 16]) -> [f32; 16] {
        std::array::from_fn(|i| quants[i] as f32 * scales[i])
    }

    /// A block of 32 activations as int8 ([`crate::QuantizedRows`]): the scale `d` (the
    /// largest magnitude over 127), each value times `1 / d` rounded half away from zero
    /// and held to ±127 (NaN to 0, as a cast gives), and their sum. Written here as the
    /// reference; a set's own version must give the same bits (the compiler left this loop
    /// scalar: its saturating cast and its `round` do not vectorize).
    ///
    /// # Safety
    ///
    /// As for [`Lanes::widen16`].
    #[inline(always)]
    unsafe fn quantize32(vals: &[f32; 32], qs: &mut [i8; 32]) -> (f32, i32) {
        let amax = vals.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut total = 0i32;
        for (q, v) in qs.iter_mut().zip(vals) {
            let qi = (v * inv).round().clamp(-127.0, 127.0) as i32;
            *q = qi as i8;
            total += qi;
        }
        (d, total)
    }

    /// Exact int8 dot products of 16 q8_0 keys with `QN` int8 queries over one group of 32
    /// dimensions: `out[j][slot] = Σ_i key(slot, i) · queries[j][i]`, where the keys come as 8
    /// quads of dimensions (`[quad][slot][4]`, quad `n` at `keys + n · stride`) and query `j`'s
    /// 32 int8 at `queries[j]`, whose sum is `sums[j]` (for sets that offset the keys to make
    /// them unsigned). Integer sums are exact, so every set gives the same numbers.
    ///
    /// # Safety
    ///
    /// `keys + n · stride` must be valid for reads of 64 bytes for each `n < 8`, each query
    /// for 32, and the CPU must have the set's features.
    #[inline(always)]
    unsafe fn q8_group_dots<const QN: usize>(
        keys: *const i8,
        stride: usize,
        queries: [*const i8; QN],
        sums: [i32; QN],
    ) -> [[i32; 16]; QN] {
        let _ = sums;
        let mut out = [[0i32; 16]; QN];
        for (o, &q) in out.iter_mut().zip(&queries) {
            for quad in 0..8 {
                for (slot, o) in o.iter_mut().enumerate() {
                    for i in 0..4 {
                        // SAFETY: inside the quad's 64 bytes and the query's 32 (our caller's
                        // promise).
                        let (k, x) = unsafe {
                            (
                                *keys.add(quad * stride + slot * 4 + i),
                                *q.add(quad * 4 + i),
                            )
                        };
                        *o += k as i32 * x as i32;
                    }
                }
            }
        }
        out
    }
}

/// Lane by lane with integer steps ([`f16_to_f32`]), which the compiler vectorizes for any
/// target (on aarch64 with NEON, its baseline).
pub struct PortableLanes;

impl Lanes for PortableLanes {
    const ACCUMULATORS: usize = 4;

    #[inline(always)]
    unsafe fn widen16(bits: &[u16; 16]) -> [f32; 16] {
        bits.map(f16_to_f32)
    }
}

/// One `vcvtph2ps` on a 512-bit vector.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512Lanes;

#[cfg(target_arch = "x86_64")]
impl Lanes for Avx512Lanes {
    /// 32 registers: 24 accumulators, 4 widened value rows and a weight.
    const ACCUMULATORS: usize = 24;

    #[inline(always)]
    unsafe fn widen16(bits: &[u16; 16]) -> [f32; 16] {
        use std::arch::x86_64::{__m256i, _mm256_lddqu_si256, _mm512_cvtph_ps, _mm512_storeu_ps};
        let mut out = [0f32; 16];
        // SAFETY: the caller vouches for AVX-512F; the load reads exactly the 32 bytes of
        // `bits` and the store writes exactly the 64 of `out`, both unaligned. A store rather
        // than a transmute of the vector: where this is not inlined, a transmuted return
        // handed the caller's 4-aligned array to an aligned vector store. `lddqu` rather than
        // `loadu`: the baseline's tuning (x86-64-v2 is tuned as Sandy Bridge) splits an
        // unaligned 32-byte load into two 16-byte halves and an insert, one more instruction
        // per 16 keys in attention's innermost loop; `lddqu` stays one load (a lone decoding
        // row at 4,096 tokens, `cargo bench -p braid-kernels --bench attention --decode
        // --grouped 4096`: 5% faster in each of four rounds).
        unsafe {
            _mm512_storeu_ps(
                out.as_mut_ptr(),
                _mm512_cvtph_ps(_mm256_lddqu_si256(bits.as_ptr() as *const __m256i)),
            )
        };
        out
    }

    #[inline(always)]
    unsafe fn dequantize16(quants: &[i8; 16], scales: &[f32; 16]) -> [f32; 16] {
        use std::arch::x86_64::{
            __m128i, _mm512_cvtepi32_ps, _mm512_cvtepi8_epi32, _mm512_loadu_ps, _mm512_mul_ps,
            _mm512_storeu_ps, _mm_loadu_si128,
        };
        let mut out = [0f32; 16];
        // SAFETY: the caller vouches for AVX-512F; the loads read exactly `quants` and
        // `scales`, the store writes exactly `out`, all unaligned.
        unsafe {
            let q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                quants.as_ptr() as *const __m128i
            )));
            _mm512_storeu_ps(
                out.as_mut_ptr(),
                _mm512_mul_ps(q, _mm512_loadu_ps(scales.as_ptr())),
            );
        }
        out
    }

    #[inline(always)]
    unsafe fn quantize32(vals: &[f32; 32], qs: &mut [i8; 32]) -> (f32, i32) {
        use std::arch::x86_64::*;
        // SAFETY: the caller vouches for AVX-512F/BW/VL; the loads read exactly `vals` and
        // the stores write exactly `qs`, unaligned.
        unsafe {
            let halves = [
                _mm512_loadu_ps(vals.as_ptr()),
                _mm512_loadu_ps(vals.as_ptr().add(16)),
            ];
            // `max` with the running maximum second: `vmaxps` returns its second operand
            // where either is NaN, so a NaN is passed over, as `f32::max` does; the lanes
            // then hold no NaN, and their maximum is exact in any order.
            let abs = |v| _mm512_abs_ps(v);
            let lanes = _mm512_max_ps(
                abs(halves[1]),
                _mm512_max_ps(abs(halves[0]), _mm512_setzero_ps()),
            );
            let amax = _mm512_reduce_max_ps(lanes);
            let d = amax / 127.0;
            let inv = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
            let mut total = _mm512_setzero_si512();
            for (h, v) in halves.into_iter().enumerate() {
                let q = round_clamp_512(_mm512_mul_ps(v, inv));
                total = _mm512_add_epi32(total, q);
                _mm_storeu_si128(
                    qs.as_mut_ptr().add(16 * h) as *mut __m128i,
                    _mm512_cvtepi32_epi8(q),
                );
            }
            (d, _mm512_reduce_add_epi32(total))
        }
    }

    /// `vpdpbusd` takes unsigned bytes, so the keys are flipped to `k + 128` (`xor 0x80`) and
    /// the sums start at `-128 · Σ query`, which that offset adds back.
    #[inline(always)]
    unsafe fn q8_group_dots<const QN: usize>(
        keys: *const i8,
        stride: usize,
        queries: [*const i8; QN],
        sums: [i32; QN],
    ) -> [[i32; 16]; QN] {
        use std::arch::x86_64::*;
        let mut out = [[0i32; 16]; QN];
        // SAFETY: the caller vouches for AVX-512F/VNNI and for the 64 bytes of every quad and
        // the 32 of every query; the stores write exactly `out`'s arrays. Loops rather than
        // closures, which would not inherit the entry point's features.
        unsafe {
            let flip = _mm512_set1_epi8(i8::MIN);
            let mut acc = [_mm512_setzero_si512(); QN];
            for j in 0..QN {
                acc[j] = _mm512_set1_epi32(-128 * sums[j]);
            }
            for quad in 0..8 {
                let k = _mm512_xor_si512(
                    _mm512_loadu_si512(keys.add(quad * stride) as *const __m512i),
                    flip,
                );
                for j in 0..QN {
                    let x = (queries[j].add(4 * quad) as *const i32).read_unaligned();
                    acc[j] = _mm512_dpbusd_epi32(acc[j], k, _mm512_set1_epi32(x));
                }
            }
            for j in 0..QN {
                _mm512_storeu_si512(out[j].as_mut_ptr() as *mut __m512i, acc[j]);
            }
        }
        out
    }
}

/// `round().clamp(-127.0, 127.0) as i32` on 16 lanes: truncate, step one away from zero
/// where the dropped fraction is at least a half (`round`'s rule), clamp, and give NaN lanes 0.
///
/// # Safety
///
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn round_clamp_512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    // SAFETY: register operations only, with the features the caller vouches for.
    unsafe {
        let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
        let half_or_more = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(
            _mm512_abs_ps(_mm512_sub_ps(x, t)),
            _mm512_set1_ps(0.5),
        );
        // ±1 with `x`'s sign, by integer operations: the float `or` is AVX-512DQ's, which
        // the entry point does not enable, and it was then a call rather than an instruction.
        let sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(i32::MIN));
        let one = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(_mm512_set1_ps(1.0)),
            sign,
        ));
        let r = _mm512_mask_add_ps(t, half_or_more, t, one);
        let r = _mm512_min_ps(
            _mm512_max_ps(r, _mm512_set1_ps(-127.0)),
            _mm512_set1_ps(127.0),
        );
        let ordered = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(x, x);
        _mm512_maskz_cvttps_epi32(ordered, r)
    }
}

/// Two F16C `vcvtph2ps` on 256-bit vectors.
#[cfg(target_arch = "x86_64")]
pub(crate) struct F16cLanes;

#[cfg(target_arch = "x86_64")]
impl Lanes for F16cLanes {
    /// 16 registers of 8 floats: 4 accumulators take 8 of them.
    const ACCUMULATORS: usize = 4;

    #[inline(always)]
    unsafe fn widen16(bits: &[u16; 16]) -> [f32; 16] {
        use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
        let mut out = [0f32; 16];
        // SAFETY: the caller vouches for F16C (and AVX); the loads read the 32 bytes of
        // `bits` and the stores write the 64 of `out`, all unaligned.
        unsafe {
            let p = bits.as_ptr() as *const __m128i;
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(p)));
            _mm256_storeu_ps(
                out.as_mut_ptr().add(8),
                _mm256_cvtph_ps(_mm_loadu_si128(p.add(1))),
            );
        }
        out
    }

    #[inline(always)]
    unsafe fn dequantize16(quants: &[i8; 16], scales: &[f32; 16]) -> [f32; 16] {
        use std::arch::x86_64::{
            __m128i, _mm256_cvtepi32_ps, _mm256_cvtepi8_epi32, _mm256_loadu_ps, _mm256_mul_ps,
            _mm256_storeu_ps, _mm_loadl_epi64,
        };
        let mut out = [0f32; 16];
        // SAFETY: the caller vouches for AVX2; the loads read 8 bytes of `quants` or 8 floats
        // of `scales` at a time, inside them, and the stores write inside `out`.
        unsafe {
            for half in 0..2 {
                let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                    quants.as_ptr().add(8 * half) as *const __m128i,
                )));
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(8 * half),
                    _mm256_mul_ps(q, _mm256_loadu_ps(scales.as_ptr().add(8 * half))),
                );
            }
        }
        out
    }

    #[inline(always)]
    unsafe fn quantize32(vals: &[f32; 32], qs: &mut [i8; 32]) -> (f32, i32) {
        use std::arch::x86_64::*;
        // SAFETY: the caller vouches for AVX2; the loads read exactly `vals` and the store
        // writes exactly `qs`, unaligned.
        unsafe {
            // No closures here (`from_fn`, `map`): a closure does not inherit the entry point's
            // features, and its intrinsics were then calls (a fifth of AVX2 decode's time).
            let p = vals.as_ptr();
            let v = [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ];
            let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
            // The running maximum second, as in the AVX-512 version: NaNs are passed over.
            let mut lanes = _mm256_setzero_ps();
            for v in v {
                lanes = _mm256_max_ps(_mm256_and_ps(v, abs_mask), lanes);
            }
            let m = _mm_max_ps(
                _mm256_castps256_ps128(lanes),
                _mm256_extractf128_ps::<1>(lanes),
            );
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let m = _mm_max_ss(m, _mm_movehdup_ps(m));
            let amax = _mm_cvtss_f32(m);
            let d = amax / 127.0;
            let inv = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
            let q = [
                round_clamp_256(_mm256_mul_ps(v[0], inv)),
                round_clamp_256(_mm256_mul_ps(v[1], inv)),
                round_clamp_256(_mm256_mul_ps(v[2], inv)),
                round_clamp_256(_mm256_mul_ps(v[3], inv)),
            ];
            let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let s = _mm_add_epi32(
                _mm256_castsi256_si128(sum),
                _mm256_extracti128_si256::<1>(sum),
            );
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
            // The packs interleave 128-bit lanes; the permutation puts the 32 bytes back in order.
            let bytes = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let bytes =
                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(qs.as_mut_ptr() as *mut __m256i, bytes);
            (d, _mm_cvtsi128_si32(s))
        }
    }

    /// `vpmaddubsw` multiplies unsigned by signed bytes into saturating 16-bit pairs, so it
    /// takes |key| and the query with the key's sign, whose pairs stay within 2 · 127 · 127;
    /// `vpmaddwd` by ones then sums each slot's four (as the AVX2 weight kernel does).
    #[inline(always)]
    unsafe fn q8_group_dots<const QN: usize>(
        keys: *const i8,
        stride: usize,
        queries: [*const i8; QN],
        _sums: [i32; QN],
    ) -> [[i32; 16]; QN] {
        use std::arch::x86_64::*;
        let mut out = [[0i32; 16]; QN];
        // SAFETY: the caller vouches for AVX2 and for the 64 bytes of every quad and the 32
        // of every query; the stores write exactly `out`'s arrays.
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let mut acc = [[_mm256_setzero_si256(); 2]; QN];
            for quad in 0..8 {
                let k = [
                    _mm256_loadu_si256(keys.add(quad * stride) as *const __m256i),
                    _mm256_loadu_si256(keys.add(quad * stride + 32) as *const __m256i),
                ];
                let magnitude = [_mm256_abs_epi8(k[0]), _mm256_abs_epi8(k[1])];
                for (acc, q) in acc.iter_mut().zip(&queries) {
                    let x = _mm256_set1_epi32((q.add(4 * quad) as *const i32).read_unaligned());
                    for ((acc, &k), &magnitude) in acc.iter_mut().zip(&k).zip(&magnitude) {
                        let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(x, k));
                        *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(pairs, ones));
                    }
                }
            }
            for (out, acc) in out.iter_mut().zip(&acc) {
                for (half, &acc) in acc.iter().enumerate() {
                    _mm256_storeu_si256(out.as_mut_ptr().add(8 * half) as *mut __m256i, acc);
                }
            }
        }
        out
    }
}

/// [`round_clamp_512`] on 8 lanes, with AVX2's compares and blends for the masks.
///
/// # Safety
///
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn round_clamp_256(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: register operations only, with the features the caller vouches for.
    unsafe {
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        let frac = _mm256_and_ps(_mm256_sub_ps(x, t), abs_mask);
        let half_or_more = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5));
        let one = _mm256_or_ps(_mm256_set1_ps(1.0), _mm256_andnot_ps(abs_mask, x));
        let r = _mm256_add_ps(t, _mm256_and_ps(one, half_or_more));
        let r = _mm256_min_ps(
            _mm256_max_ps(r, _mm256_set1_ps(-127.0)),
            _mm256_set1_ps(127.0),
        );
        let ordered = _mm256_cmp_ps::<_CMP_ORD_Q>(x, x);
        _mm256_cvttps_epi32(_mm256_and_ps(r, ordered))
    }
}

/// Code written once over [`Lanes`], to be compiled for one instruction set's float loops.
pub trait FloatLoops {
    type Output;

    /// Implementations are `#[inline(always)]`, so that the entry point that calls them
    /// compiles their body with its features.
    ///
    /// # Safety
    ///
    /// The CPU must have `L`'s features ([`crate::Kernel::run_float_loops`] sees to that).
    unsafe fn run<L: Lanes>(self) -> Self::Output;
}

/// Which compilation of the float loops a kernel runs with (a row of the kernel table says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatIsa {
    /// AVX-512 F/BW/VL/VNNI with FMA and F16C: 16 floats a register, 32 registers.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// AVX2 with FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// The baseline CPU (on aarch64, NEON).
    Portable,
}

impl FloatIsa {
    /// Runs `loops` through this set's entry point.
    ///
    /// # Safety
    ///
    /// The CPU must have this set's features.
    pub(crate) unsafe fn run<F: FloatLoops>(self, loops: F) -> F::Output {
        // SAFETY: (every arm) the caller vouches for the features.
        unsafe {
            match self {
                #[cfg(target_arch = "x86_64")]
                FloatIsa::Avx512 => enter_avx512(loops),
                #[cfg(target_arch = "x86_64")]
                FloatIsa::Avx2 => enter_avx2(loops),
                FloatIsa::Portable => loops.run::<PortableLanes>(),
            }
        }
    }
}

/// # Safety
///
/// The CPU must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn enter_avx512<F: FloatLoops>(loops: F) -> F::Output {
    // SAFETY: the features are enabled.
    unsafe { loops.run::<Avx512Lanes>() }
}

/// # Safety
///
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn enter_avx2<F: FloatLoops>(loops: F) -> F::Output {
    // SAFETY: the features are enabled.
    unsafe { loops.run::<F16cLanes>() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kernel;
    use half::f16;

    struct Widen<'a>(&'a [u16; 16]);

    impl FloatLoops for Widen<'_> {
        type Output = [f32; 16];

        #[inline(always)]
        unsafe fn run<L: Lanes>(self) -> [f32; 16] {
            // SAFETY: the caller vouches for `L`'s features.
            unsafe { L::widen16(self.0) }
        }
    }

    fn widen(kernel: Kernel, bits: &[u16; 16]) -> [f32; 16] {
        kernel.run_float_loops(Widen(bits))
    }

    #[test]
    fn every_kernel_widens_every_finite_half_exactly() {
        // Every 37th under Miri, which takes minutes over all of them.
        let finite: Vec<u16> = (0..=u16::MAX)
            .filter(|&b| f16::from_bits(b).is_finite())
            .step_by(if cfg!(miri) { 37 } else { 1 })
            .collect();
        for kernel in Kernel::supported() {
            for chunk in finite.chunks_exact(16) {
                let wide = widen(kernel, chunk.try_into().unwrap());
                for (&bits, got) in chunk.iter().zip(wide) {
                    assert_eq!(
                        got.to_bits(),
                        f16::from_bits(bits).to_f32().to_bits(),
                        "{kernel}: {bits:#06x}"
                    );
                }
            }
        }
    }
}
