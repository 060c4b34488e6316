//! The one thing every weight format provides whatever the instruction set: its portable
//! reference, which the kernel table's portable row holds and every other row must match.

use crate::QuantizedRows;

/// A weight format's tile.
pub(crate) trait FormatTile: Sized {
    /// Writes `out[row * n + col]` for every row of `x` and every column `col` of the tiles
    /// `tiles` of `weights` (`[n_tiles][k_blocks]`; the 16 columns from `16 · tile`, fewer in a
    /// last partial tile), and nothing else.
    ///
    /// # Safety
    ///
    /// `out` must be valid for writes of `x.rows() * n` floats, and no one else may read or
    /// write the elements this call writes until it returns.
    unsafe fn reference_tiles(
        x: &QuantizedRows,
        weights: &[Self],
        n: usize,
        tiles: std::ops::Range<usize>,
        out: *mut f32,
    );
}
