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
use crate::format_tile::FormatTile;
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
    let ops = kernel.ops();
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
        // SAFETY: the CPU has the kernel's features (`ops` checked); `out` holds `m * n`
        // floats (asserted above) and outlives the loop. Task `c` writes only the columns of
        // tiles `tiles`, and the tasks' tile ranges do not overlap, so no element is written by
        // two tasks or read by any.
        unsafe {
            match w {
                PackedWeight::Int8(w) => (ops.int8)(x, &w.tiles, w.n, tiles, out.get()),
                PackedWeight::Int4(w) => (ops.int4)(x, &w.tiles, w.n, tiles, out.get()),
                PackedWeight::Int5(w) => (ops.int5)(x, &w.tiles, w.n, tiles, out.get()),
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
