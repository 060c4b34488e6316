//! The loops [`int8_peak_gops`](crate::int8_peak::int8_peak_gops) times: each ISA's int8
//! multiply-add run from registers, on independent accumulators so no instruction waits for
//! another. Each ISA file names its loop in its row of the kernel table, which the timing
//! reads; kept apart from the timing so the ISA files do not import the table back.

/// Independent accumulators per thread: enough to cover the instructions' latency.
pub(crate) const CHAINS: usize = 12;

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
