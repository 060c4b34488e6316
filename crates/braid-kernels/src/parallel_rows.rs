//! How the step's row-wise work is split over the compute threads: the same rule for the
//! model's row loops (norms, rope, activations, residuals) and for quantizing activations.

use crate::{FloatLoops, Lanes};
use rayon::prelude::*;

/// Rows from which the step's row-wise loops (norms, rope, activations, residuals, quantizing)
/// are split over the compute threads. A prompt slice has hundreds of rows, and run on one
/// core these loops were a quarter of prefill's time while the other core waited; a decode
/// step's few rows cost less than handing them over.
pub const PARALLEL_ROWS: usize = 16;

/// Rows per task when `rows` rows are split: four tasks a thread, so a core slowed by a
/// neighbour hands some of its share to the other.
pub fn rows_per_task(rows: usize) -> usize {
    rows.div_ceil(4 * rayon::current_num_threads())
}

/// `f(row, out_row)` for each `width`-wide row of `out`, over the compute threads when there
/// are many rows, compiled for the instruction set of `L`. Each row is computed alike either
/// way, and on every set (the same IEEE operations in the same order).
///
/// A closure does not inherit the target features of the function it is written in, and the
/// threads' tasks run it from rayon's code, compiled for the baseline: the model's norms,
/// rope and activations ran on 4-float SSE vectors while its step ran on AVX-512. So each
/// task enters `L`'s entry point and calls `f` from there, where it is inlined and vectorized
/// for `L`.
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
pub unsafe fn for_rows<L: Lanes>(
    out: &mut [f32],
    width: usize,
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    let rows = out.len() / width;
    let task = |first: usize, chunk: &mut [f32]| {
        // SAFETY: our caller vouches for `L`'s features.
        unsafe {
            L::enter(Rows {
                out: chunk,
                width,
                first,
                f: &f,
            })
        }
    };
    if rows < PARALLEL_ROWS {
        task(0, out);
        return;
    }
    let per_task = rows_per_task(rows);
    out.par_chunks_mut(per_task * width)
        .enumerate()
        .for_each(|(i, chunk)| task(i * per_task, chunk));
}

/// [`for_rows`] with `f` compiled for the baseline CPU, for callers outside the float loops
/// (whose `f` enters them itself, or is too small to matter).
#[inline(always)]
pub fn for_rows_baseline(out: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    // SAFETY: the baseline needs no features.
    unsafe { for_rows::<crate::PortableLanes>(out, width, f) }
}

/// One task's rows: `f(first + i, row i)` for each `width`-wide row of `out`.
struct Rows<'a, F> {
    out: &'a mut [f32],
    width: usize,
    first: usize,
    f: &'a F,
}

impl<F: Fn(usize, &mut [f32])> FloatLoops for Rows<'_, F> {
    type Output = ();

    #[inline(always)]
    unsafe fn run<L: Lanes>(self) {
        for (i, o) in self.out.chunks_exact_mut(self.width).enumerate() {
            (self.f)(self.first + i, o);
        }
    }
}
