//! The int8 multiply-add peak of this CPU, measured: what prefill is compared against.
//!
//! Prefill multiplies every weight by every prompt row, so it is bound by arithmetic, and how
//! far it is from the peak says how much a better kernel could still gain. The peak is the
//! kernel's own multiply-add instruction run from registers on every compute thread at once
//! (no memory, no dependency stalls: twelve independent accumulators per thread):
//! `vpdpbusd` on 512 or 256 bits for the VNNI kernels, `vpmaddubsw` + `vpaddw` for AVX2 (the
//! 4-bit path's inner pair), `sdot` for NEON. One multiply-add counts as two operations.

use super::Kernel;
use std::time::Instant;

/// Independent accumulators per thread: enough to cover the instructions' latency.
const CHAINS: usize = 12;

/// Operations per second (GOP/s, a multiply-add being two) that `kernel`'s multiply-add
/// instruction sustains on all rayon threads together, or `None` for the portable kernel,
/// which has no such instruction. Takes about `iters` × 12 instructions per thread.
pub fn int8_peak_gops(kernel: Kernel, iters: usize) -> Option<f64> {
    assert!(
        kernel.is_supported(),
        "the {kernel} kernel does not run on this CPU"
    );
    let peak = kernel.ops().peak.as_ref()?;
    let t = Instant::now();
    let sums = rayon::broadcast(|_| {
        // SAFETY: the kernel's features are present (asserted above).
        unsafe { (peak.run)(iters) }
    });
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(sums);
    let threads = rayon::current_num_threads() as f64;
    let macs = threads * (iters * CHAINS * peak.macs) as f64;
    Some(2.0 * macs / secs / 1e9)
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::CHAINS;
    use std::arch::x86_64::*;
    use std::hint::black_box;

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(crate) unsafe fn dpbusd512(iters: usize) -> i32 {
        let (a, b) = (
            black_box(_mm512_set1_epi8(1)),
            black_box(_mm512_set1_epi8(1)),
        );
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_dpbusd_epi32(*x, a, b);
            }
        }
        acc.iter().fold(0, |s, x| s ^ _mm512_reduce_add_epi32(*x))
    }

    #[target_feature(enable = "avx2,avxvnni")]
    pub(crate) unsafe fn dpbusd256(iters: usize) -> i32 {
        let (a, b) = (
            black_box(_mm256_set1_epi8(1)),
            black_box(_mm256_set1_epi8(1)),
        );
        let mut acc = [_mm256_setzero_si256(); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_dpbusd_avx_epi32(*x, a, b);
            }
        }
        acc.iter().fold(0, |s, x| s ^ _mm256_extract_epi32::<0>(*x))
    }

    #[target_feature(enable = "avx2")]
    pub(crate) unsafe fn maddubs256(iters: usize) -> i32 {
        let b = black_box(_mm256_set1_epi8(1));
        let mut acc = [_mm256_setzero_si256(); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                // The accumulator is also an input: a product of loop invariants would be
                // computed once, outside the loop.
                *x = _mm256_add_epi16(*x, _mm256_maddubs_epi16(*x, b));
            }
        }
        acc.iter().fold(0, |s, x| s ^ _mm256_extract_epi32::<0>(*x))
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod arm {
    use super::CHAINS;
    use std::arch::aarch64::*;
    use std::arch::asm;
    use std::hint::black_box;

    #[target_feature(enable = "neon,dotprod")]
    pub(crate) unsafe fn sdot(iters: usize) -> i32 {
        let (a, b) = (black_box(vdupq_n_s8(1)), black_box(vdupq_n_s8(1)));
        let mut acc = [vdupq_n_s32(0); CHAINS];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                // SAFETY: dotprod is enabled; the instruction touches only its registers.
                unsafe {
                    asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) *x,
                         a = in(vreg) a, b = in(vreg) b, options(pure, nomem, nostack))
                };
            }
        }
        acc.iter().fold(0, |s, x| s ^ vgetq_lane_s32::<0>(*x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vector_kernel_has_a_peak_and_the_portable_one_none() {
        for kernel in Kernel::supported() {
            let peak = int8_peak_gops(kernel, 1000);
            if kernel == Kernel::Portable {
                assert_eq!(peak, None);
            } else {
                let peak = peak.expect("a vector kernel's peak");
                assert!(peak.is_finite() && peak > 0.0, "{kernel}: {peak}");
            }
        }
    }
}
