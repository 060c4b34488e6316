//! The activations as every weight format's kernel reads them: int8 per row and per block of
//! 32 along K, with what each format needs besides the values to finish a block's dot product.
//! They are quantized once per matmul and read by every tile, so anything a tile would
//! otherwise recompute per output (a block's sum) is computed here once.

use super::BLOCK;

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
        for b in 0..m * k_blocks {
            let vals = &x[b * BLOCK..(b + 1) * BLOCK];
            let amax = vals.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for (q, v) in self.qs[b * BLOCK..(b + 1) * BLOCK].iter_mut().zip(vals) {
                let qi = (v * inv).round().clamp(-127.0, 127.0) as i32;
                *q = qi as i8;
                sum += qi;
            }
            self.scales[b] = d;
            self.corrections[b] = 128 * sum;
            self.sums[b] = d * sum as f32;
        }
    }

    pub fn rows(&self) -> usize {
        self.m
    }

    pub fn k(&self) -> usize {
        self.k_blocks * BLOCK
    }
}
