//! Quantizing a step's activations into [`QuantizedRows`], once per matmul, over the compute
//! threads when there are many rows (a prompt's), each block by the active kernel's float loops
//! ([`crate::Lanes::quantize32`]). A file apart from the rows' layout (`quantized_rows.rs`),
//! which the weight kernels read: quantizing picks a kernel, the kernel table depends on those
//! kernels, and one file holding both made the files import one another in a circle.

use crate::{Kernel, QuantizedRows, BLOCK};
use rayon::prelude::*;

impl QuantizedRows {
    /// Quantizes `m` rows of `k` values (row-major) into `self`, reusing its buffers.
    pub fn quantize(&mut self, x: &[f32], m: usize, k: usize) {
        self.quantize_with(crate::active(), x, m, k)
    }

    /// [`QuantizedRows::quantize`] with `kernel`'s float loops, which must be one this CPU
    /// runs; every kernel gives the same bits.
    pub fn quantize_with(&mut self, kernel: Kernel, x: &[f32], m: usize, k: usize) {
        assert!(k.is_multiple_of(BLOCK) && x.len() >= m * k);
        let k_blocks = k / BLOCK;
        self.m = m;
        self.k_blocks = k_blocks;
        self.qs.resize(m * k, 0);
        self.scales.resize(m * k_blocks, 0.0);
        self.corrections.resize(m * k_blocks, 0);
        self.sums.resize(m * k_blocks, 0.0);
        let x = &x[..m * k];
        if m < crate::parallel_rows::PARALLEL_ROWS {
            kernel.run_float_loops(QuantizeTask {
                x,
                qs: &mut self.qs,
                scales: &mut self.scales,
                corrections: &mut self.corrections,
                sums: &mut self.sums,
            });
            return;
        }
        let rows = crate::parallel_rows::rows_per_task(m);
        let blocks = rows * k_blocks;
        self.qs
            .par_chunks_mut(rows * k)
            .zip(x.par_chunks(rows * k))
            .zip(self.scales.par_chunks_mut(blocks))
            .zip(self.corrections.par_chunks_mut(blocks))
            .zip(self.sums.par_chunks_mut(blocks))
            .for_each(|((((qs, x), scales), corrections), sums)| {
                kernel.run_float_loops(QuantizeTask {
                    x,
                    qs,
                    scales,
                    corrections,
                    sums,
                })
            });
    }
}

/// Rows to quantize, run inside the float loops' entry point: a closure there would be a
/// function of its own, compiled for the baseline (the compiler did not inline it).
struct QuantizeTask<'a> {
    x: &'a [f32],
    qs: &'a mut [i8],
    scales: &'a mut [f32],
    corrections: &'a mut [i32],
    sums: &'a mut [f32],
}

impl crate::FloatLoops for QuantizeTask<'_> {
    type Output = ();

    #[inline(always)]
    unsafe fn run<L: crate::Lanes>(self) {
        // SAFETY: the caller vouches for `L`'s features.
        unsafe { quantize_blocks::<L>(self.x, self.qs, self.scales, self.corrections, self.sums) }
    }
}

/// Quantizes the blocks of `x` into `qs`, with each block's scale, correction and scaled sum.
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
unsafe fn quantize_blocks<L: crate::Lanes>(
    x: &[f32],
    qs: &mut [i8],
    scales: &mut [f32],
    corrections: &mut [i32],
    sums: &mut [f32],
) {
    let blocks = qs
        .chunks_exact_mut(BLOCK)
        .zip(x.chunks_exact(BLOCK))
        .zip(scales)
        .zip(corrections)
        .zip(sums);
    for ((((qs, vals), scale), correction), sum) in blocks {
        let (qs, vals) = (qs.try_into().unwrap(), vals.try_into().unwrap());
        // SAFETY: the caller vouches for `L`'s features.
        let (d, total) = unsafe { L::quantize32(vals, qs) };
        *scale = d;
        *correction = 128 * total;
        *sum = d * total as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that probe every rule of the rounding: halves (which round away from zero),
    /// the floats either side of them, zeros of both signs, NaN and infinities, and blocks
    /// whose largest value is 0 or tiny.
    fn awkward_rows(m: usize, k: usize) -> Vec<f32> {
        let mut x: Vec<f32> = (0..m * k)
            .map(|i| {
                let base = ((i * 7919) % 509) as f32 / 2.0 - 127.0;
                match i % 7 {
                    0 => base,
                    1 => f32::from_bits(base.to_bits() + 1),
                    2 => f32::from_bits(base.to_bits().wrapping_sub(1)),
                    3 => -base * 0.37,
                    4 => -0.0,
                    _ => base * 1e-3,
                }
            })
            .collect();
        // Block 1 of row 0 all zero, block 2 with a NaN, block 3 with infinities, block 4
        // subnormal.
        x[32..64].iter_mut().for_each(|v| *v = 0.0);
        x[70] = f32::NAN;
        x[100] = f32::INFINITY;
        x[101] = f32::NEG_INFINITY;
        x[128..160]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = f32::from_bits(i as u32 + 1));
        x
    }

    #[test]
    fn every_kernel_quantizes_to_the_same_bits_as_the_portable_one() {
        for m in [3, 40] {
            let k = 256;
            let x = awkward_rows(m, k);
            let mut expected = QuantizedRows::default();
            expected.quantize_with(Kernel::Portable, &x, m, k);
            for kernel in Kernel::supported() {
                let mut got = QuantizedRows::default();
                got.quantize_with(kernel, &x, m, k);
                assert_eq!(got.qs, expected.qs, "{kernel}, {m} rows: values");
                assert_eq!(
                    got.corrections, expected.corrections,
                    "{kernel}: corrections"
                );
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&got.scales),
                    bits(&expected.scales),
                    "{kernel}: scales"
                );
                assert_eq!(bits(&got.sums), bits(&expected.sums), "{kernel}: sums");
            }
        }
    }

    #[test]
    fn the_portable_rounding_is_half_away_from_zero_and_clamped() {
        let mut x = vec![0f32; 32];
        x[..7].copy_from_slice(&[127.0, 2.5, -2.5, 0.49999997, -126.5, f32::NAN, 0.5]);
        let mut q = QuantizedRows::default();
        q.quantize_with(Kernel::Portable, &x, 1, 32);
        assert_eq!(q.scales[0], 1.0);
        assert_eq!(&q.qs[..7], &[127, 3, -3, 0, -127, 0, 1]);
        assert_eq!(q.corrections[0], 128);
    }
}
