//! How the step's row-wise work is split over the compute threads: the same rule for the
//! model's row loops (norms, rope, activations, residuals) and for quantizing activations.
//!
//! A task handed to another thread is a closure of its own, compiled for the binary's baseline
//! whatever its caller was compiled for, so each task enters the float loops' instruction set
//! again ([`in_float_loops`]): without that, a prompt's norms and activations ran on 128-bit
//! vectors (and its quantizing, with them, about a tenth of a prefill's profile on Zen 4).

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
/// are many rows. Each row is computed alike either way. Mark `f` `#[inline(always)]`: it is
/// called from two places, so the compiler may otherwise keep a large one as a function of its
/// own, compiled for the baseline (SiLU's exponential ran as library calls to `fmaf`).
#[inline(always)]
pub fn for_rows(out: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let rows = out.len() / width;
    if rows < PARALLEL_ROWS {
        // A `for` loop: `for_each` is a fold, which the compiler kept out of line, compiled
        // for the baseline, with `f` inside it.
        for (r, o) in out.chunks_exact_mut(width).enumerate() {
            f(r, o);
        }
        return;
    }
    let per_task = rows_per_task(rows);
    out.par_chunks_mut(per_task * width)
        .enumerate()
        .for_each(|(task, chunk)| {
            in_float_loops(
                #[inline(always)]
                || {
                    for (i, o) in chunk.chunks_exact_mut(width).enumerate() {
                        f(task * per_task + i, o);
                    }
                },
            )
        });
}

/// `f()` called from inside the active kernel's float-loop entry point, where the compiler can
/// inline it and compile it for that instruction set: the same arithmetic, on wider vectors.
#[inline(always)]
pub fn in_float_loops<T>(f: impl FnOnce() -> T) -> T {
    crate::active().run_float_loops(Task(f))
}

struct Task<F>(F);

impl<T, F: FnOnce() -> T> crate::FloatLoops for Task<F> {
    type Output = T;

    #[inline(always)]
    unsafe fn run<L: crate::Lanes>(self) -> T {
        (self.0)()
    }
}
