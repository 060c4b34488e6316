//! What one instruction set computes with: the operations a row of the kernel table
//! ([`crate::kernel_table`]) holds, defined apart from the table so that the instruction-set
//! files that fill them in and the table that lists them do not depend on each other.

use crate::{int4, int5, int8, FloatIsa, QuantizedRows};
use std::ops::Range;

/// Writes `out[row * n + col]` for every row of the activations and every column of the given
/// tiles of a weight `n` outputs wide, exactly as the format's portable reference does.
///
/// # Safety
///
/// The CPU must have the kernel's features; `out` must be valid for writes of `rows * n`
/// floats, and no one else may read or write the elements the call writes until it returns.
pub(crate) type TilesFn<T> = unsafe fn(&QuantizedRows, &[T], usize, Range<usize>, *mut f32);

/// The multiply-add instruction of a kernel, run from registers: `run(iters)` executes
/// `iters` × 12 of them; each does `macs` multiply-adds.
///
/// # Safety (of `run`)
///
/// The CPU must have the kernel's features.
pub(crate) struct PeakOp {
    pub macs: usize,
    pub run: unsafe fn(usize) -> i32,
}

/// What one instruction set computes with.
pub(crate) struct KernelOps {
    pub int8: TilesFn<int8::Tile>,
    pub int4: TilesFn<int4::Tile>,
    pub int5: TilesFn<int5::Tile>,
    pub floats: FloatIsa,
    pub peak: Option<PeakOp>,
}
