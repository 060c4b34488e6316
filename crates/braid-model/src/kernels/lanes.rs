//! What the float loops (attention, the softmax's exponential) need from an instruction set
//! beyond what the compiler derives from plain Rust: widening half floats from the KV cache.
//!
//! Those loops are written once, generic over [`Lanes`] and `#[inline(always)]`, and each
//! instruction set gets a `#[target_feature]` entry point that instantiates them: inside it,
//! the compiler vectorizes the same source for that set's registers and fuses every `mul_add`
//! into one instruction. The arithmetic is the same IEEE operations in the same order on every
//! path, so the results are the same bits.

use crate::kv_pool::f16_to_f32;

/// One instruction set's way of widening 16 half floats.
pub(crate) trait Lanes {
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
}

/// Lane by lane with integer steps ([`f16_to_f32`]), which the compiler vectorizes for any
/// target (on aarch64 with NEON, its baseline).
pub(crate) struct PortableLanes;

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
    /// 32 registers: 12 accumulators, 4 widened value rows and a weight.
    const ACCUMULATORS: usize = 12;

    #[inline(always)]
    unsafe fn widen16(bits: &[u16; 16]) -> [f32; 16] {
        use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm512_cvtph_ps, _mm512_storeu_ps};
        let mut out = [0f32; 16];
        // SAFETY: the caller vouches for AVX-512F; the load reads exactly the 32 bytes of
        // `bits` and the store writes exactly the 64 of `out`, both unaligned. A store rather
        // than a transmute of the vector: where this is not inlined, a transmuted return
        // handed the caller's 4-aligned array to an aligned vector store.
        unsafe {
            _mm512_storeu_ps(
                out.as_mut_ptr(),
                _mm512_cvtph_ps(_mm256_loadu_si256(bits.as_ptr() as *const __m256i)),
            )
        };
        out
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Kernel;
    use half::f16;

    fn widen(kernel: Kernel, bits: &[u16; 16]) -> [f32; 16] {
        assert!(kernel.is_supported());
        // SAFETY: the CPU has the kernel's features (asserted above).
        unsafe {
            match kernel {
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512Vnni => Avx512Lanes::widen16(bits),
                #[cfg(target_arch = "x86_64")]
                Kernel::AvxVnni | Kernel::Avx2 => F16cLanes::widen16(bits),
                _ => PortableLanes::widen16(bits),
            }
        }
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
