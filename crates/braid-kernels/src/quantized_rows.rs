//! The activations as every weight format's kernel reads them: int8 per row and per block of
//! 32 along K, with what each format needs besides the values to finish a block's dot product.
//! They are quantized once per matmul and read by every tile, so anything a tile would
//! otherwise recompute per output (a block's sum) is computed once, when the rows are
//! quantized ([`crate::activation_quantizer`]).

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
    pub fn rows(&self) -> usize {
        self.m
    }

    pub fn k(&self) -> usize {
        self.k_blocks * BLOCK
    }
}
