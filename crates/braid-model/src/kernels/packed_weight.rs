//! A weight matrix in whichever format its GGUF tensor allows, and the one matmul entry point
//! over all formats and kernels.
//!
//! Why more than one format: a decode step reads every weight once, so a single sequence is
//! bound by the bytes the weights take. 4-bit tensors (Q4_0, Q4_1, Q4_K) keep their 4 bits and
//! their own scales ([`Int4Weight`], 0.625 bytes per weight), 5-bit ones (Q5_0, Q5_1, Q5_K)
//! their 5 ([`Int5Weight`], 0.75 bytes per weight); everything else goes to int8 blocks
//! ([`Int8Weight`], 1.0625 bytes per weight). The formats share the tile shape (16 output
//! rows × 32 K values), the activations ([`QuantizedRows`]) and the way a matmul is split over
//! the cores, so each kernel file adds only how one block of a format meets the rows.

use super::int4::Int4Weight;
use super::int5::Int5Weight;
use super::int8::Int8Weight;
use super::{Kernel, QuantizedRows, TILE_N};
use crate::send_ptr::SendPtr;
use rayon::prelude::*;

pub enum PackedWeight {
    Int8(Int8Weight),
    Int4(Int4Weight),
    Int5(Int5Weight),
}

impl PackedWeight {
    /// Requantizes a row-major `n × k` f32 matrix (row i = output i) to int8 blocks.
    pub fn from_f32(data: &[f32], n: usize, k: usize) -> Self {
        PackedWeight::Int8(Int8Weight::from_f32(data, n, k))
    }

    pub fn n(&self) -> usize {
        match self {
            PackedWeight::Int8(w) => w.n,
            PackedWeight::Int4(w) => w.n,
            PackedWeight::Int5(w) => w.n,
        }
    }

    pub fn k(&self) -> usize {
        match self {
            PackedWeight::Int8(w) => w.k,
            PackedWeight::Int4(w) => w.k,
            PackedWeight::Int5(w) => w.k,
        }
    }

    /// The format's name, as reports show it.
    pub fn format(&self) -> &'static str {
        match self {
            PackedWeight::Int8(_) => "int8",
            PackedWeight::Int4(_) => "int4",
            PackedWeight::Int5(_) => "int5",
        }
    }

    /// Bytes the kernel streams per full pass over the weights.
    pub fn size_in_bytes(&self) -> usize {
        match self {
            PackedWeight::Int8(w) => w.size_in_bytes(),
            PackedWeight::Int4(w) => w.size_in_bytes(),
            PackedWeight::Int5(w) => w.size_in_bytes(),
        }
    }

    /// The dequantized weights of one output row (used for embedding lookups).
    #[inline(always)]
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        match self {
            PackedWeight::Int8(w) => w.dequantize_row(row, out),
            PackedWeight::Int4(w) => w.dequantize_row(row, out),
            PackedWeight::Int5(w) => w.dequantize_row(row, out),
        }
    }
}

/// `out[m][n] = Σ_k x[m][k] · w[n][k]` for all rows of `x`, with the kernel in force
/// ([`super::active`]), split across the rayon pool by output tiles.
pub fn matmul(x: &QuantizedRows, w: &PackedWeight, out: &mut [f32]) {
    matmul_with(super::active(), x, w, out)
}

/// [`matmul`] with the kernel `kernel`, which must be one this CPU runs (it panics otherwise).
pub fn matmul_with(kernel: Kernel, x: &QuantizedRows, w: &PackedWeight, out: &mut [f32]) {
    let (m, n) = (x.m, w.n());
    assert_eq!(x.k(), w.k(), "activation width does not match the weight");
    assert!(out.len() >= m * n);
    assert!(
        kernel.is_supported(),
        "the {kernel} kernel does not run on this CPU"
    );
    if m == 0 {
        return;
    }
    let n_tiles = n.div_ceil(TILE_N);
    let threads = rayon::current_num_threads().max(1);
    // Enough chunks to balance two uneven cores, few enough that scheduling stays cheap.
    let chunk = n_tiles.div_ceil(threads * 2).max(1);
    // The tasks share the output through its raw pointer, not a `&mut` slice each: slices of
    // the whole output would alias one another even though their writes do not.
    let out = SendPtr::new(out.as_mut_ptr());
    (0..n_tiles.div_ceil(chunk)).into_par_iter().for_each(|c| {
        let tiles = c * chunk..((c + 1) * chunk).min(n_tiles);
        // SAFETY: the CPU has the kernel's features (asserted above); `out` holds `m * n`
        // floats (asserted above) and outlives the loop. Task `c` writes only the columns of
        // tiles `tiles`, and the tasks' tile ranges do not overlap, so no element is written by
        // two tasks or read by any.
        unsafe {
            match w {
                PackedWeight::Int8(w) => tiles_with(kernel, x, &w.tiles, w.n, tiles, out.get()),
                PackedWeight::Int4(w) => tiles_with(kernel, x, &w.tiles, w.n, tiles, out.get()),
                PackedWeight::Int5(w) => tiles_with(kernel, x, &w.tiles, w.n, tiles, out.get()),
            }
        }
    });
}

/// The portable path, as the tests' oracle: identical arithmetic to every kernel, one element
/// at a time.
pub fn matmul_reference(x: &QuantizedRows, w: &PackedWeight, out: &mut [f32]) {
    assert!(out.len() >= x.m * w.n());
    let tiles = 0..w.n().div_ceil(TILE_N);
    // SAFETY: `out` holds `m * n` floats and is borrowed mutably for the call, so nothing else
    // reads or writes it meanwhile.
    unsafe {
        match w {
            PackedWeight::Int8(w) => {
                FormatTile::reference_tiles(x, &w.tiles, w.n, tiles, out.as_mut_ptr())
            }
            PackedWeight::Int4(w) => {
                FormatTile::reference_tiles(x, &w.tiles, w.n, tiles, out.as_mut_ptr())
            }
            PackedWeight::Int5(w) => {
                FormatTile::reference_tiles(x, &w.tiles, w.n, tiles, out.as_mut_ptr())
            }
        }
    }
}

/// A weight format's tile, as the one dispatcher below takes it: a block function for each
/// instruction set of this architecture (each ISA file's `Block`), and the portable reference.
pub(super) trait FormatTile: Sized + IsaBlocks {
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

/// The block functions a tile needs on this architecture.
#[cfg(target_arch = "x86_64")]
pub(super) trait IsaBlocks: super::avx512::Block + super::avx2::Block {}
#[cfg(target_arch = "x86_64")]
impl<T: super::avx512::Block + super::avx2::Block> IsaBlocks for T {}
#[cfg(target_arch = "aarch64")]
pub(super) trait IsaBlocks: super::neon::Block {}
#[cfg(target_arch = "aarch64")]
impl<T: super::neon::Block> IsaBlocks for T {}
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) trait IsaBlocks {}
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
impl<T> IsaBlocks for T {}

/// The tiles `tiles` of the product of `x` with `weights` (`n` outputs), with `kernel`: writes
/// what the format's `reference_tiles` writes, with the same values.
///
/// # Safety
///
/// The CPU must have `kernel`'s features, and `out` must be as `reference_tiles` requires.
unsafe fn tiles_with<T: FormatTile>(
    kernel: Kernel,
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: (every arm) the caller vouches for the CPU features and for `out`.
    unsafe {
        match kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => super::avx512::matmul_tiles(x, weights, n, tiles, out),
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni => super::avx2::matmul_tiles_avxvnni(x, weights, n, tiles, out),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => super::avx2::matmul_tiles_avx2(x, weights, n, tiles, out),
            #[cfg(target_arch = "aarch64")]
            Kernel::NeonI8mm => super::neon::matmul_tiles_i8mm(x, weights, n, tiles, out),
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => super::neon::matmul_tiles_dotprod(x, weights, n, tiles, out),
            _ => T::reference_tiles(x, weights, n, tiles, out),
        }
    }
}
