//! The int8 multiply-add peak of this CPU, measured: what prefill is compared against.
//!
//! Prefill multiplies every weight by every prompt row, so it is bound by arithmetic, and how
//! far it is from the peak says how much a better kernel could still gain. The peak is the
//! kernel's own multiply-add instruction run from registers on every compute thread at once
//! (no memory, no dependency stalls: twelve independent accumulators per thread, four tiles
//! for AMX): `tdpbssd` on full tiles for AMX, `vpdpbusd` on 512 or 256 bits for the VNNI
//! kernels, `vpmaddubsw` + `vpaddw` for AVX2 (the 4-bit path's inner pair), `sdot` for NEON.
//! One multiply-add counts as two operations.

use crate::peak_loops::CHAINS;
use crate::Kernel;
use std::time::Instant;

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
