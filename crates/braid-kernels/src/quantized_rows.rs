//! The activations as every weight format's kernel reads them: int8 per row and per block of
//! 32 along K, with what each format needs besides the values to finish a block's dot product.
//! They are quantized once per matmul and read by every tile, so anything a tile would
//! otherwise recompute per output (a block's sum) is computed here once, over the compute
//! threads when there are many rows (a prompt's).

use super::BLOCK;
use rayon::prelude::*;

/// Activations quantized per row and per block of 32: signed values and their scale, the
/// `128 · Σq` correction that int8 weights' unsigned offset adds to every block dot product,
/// and the scaled block sum `d · Σq` that 4-bit weights' per-block minimum multiplies.
#[derive(Default)]
pub struct QuantizedRows {
    pub(super) m: usize,
    pub(super) k_blocks: usize,
    pub(super) qs: Vec<i8>,
    pub(super) scales: Vec<f32>,
    pub(super) corrections: Vec<i32>,
    pub(super) sums: Vec<f32>,
}

impl QuantizedRows {
    /// Quantizes `m` rows of `k` values (row-major) into `self`, reusing its buffers.
    #[inline(always)]
    pub fn quantize(&mut self, x: &[f32], m: usize, k: usize) {
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
            quantize_blocks(
                x,
                &mut self.qs,
                &mut self.scales,
                &mut self.corrections,
                &mut self.sums,
            );
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
                quantize_blocks(x, qs, scales, corrections, sums)
            });
    }

    pub fn rows(&self) -> usize {
        self.m
    }

    pub fn k(&self) -> usize {
        self.k_blocks * BLOCK
    }
}

/// Quantizes the blocks of `x` into `qs`, with each block's scale, correction and scaled sum.
#[inline(always)]
fn quantize_blocks(
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
        let amax = vals.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut total = 0i32;
        for (q, v) in qs.iter_mut().zip(vals) {
            let qi = (v * inv).round().clamp(-127.0, 127.0) as i32;
            *q = qi as i8;
            total += qi;
        }
        *scale = d;
        *correction = 128 * total;
        *sum = d * total as f32;
    }
}
