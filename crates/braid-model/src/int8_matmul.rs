//! The one hand-written kernel in braid: `y = x · Wᵀ` with int8 weights and int8 activations.
//!
//! Why it exists: candle runs the default model's Q4_1 matmuls on a scalar path (~110 tokens/s
//! whatever the batch) and its Q8_0 path stops gaining after ~4 rows, because it re-reads every
//! weight block for every activation row. A serving step carries many rows (16 decodes, or a
//! prompt slice), so the kernel here is *weight-stationary*: each weight block is loaded once
//! and applied to every row of the step, with AVX-512 VNNI integer dot products (`vpdpbusd`).
//!
//! Format: weights are requantized at load to 8 bits in blocks of 32 along K (like Q8_0), and
//! packed in tiles of 16 output rows so that one `vpdpbusd` yields 16 outputs for 4 K values.
//! Weights are stored offset by +128 (unsigned) and activations are signed, so the product
//! carries `128 · Σa` per block, which is removed with a per-(row, block) correction computed
//! when the activations are quantized.
//!
//! Every output element is reduced in the same order whatever the number of rows or the tile it
//! falls in, so a sequence's result does not depend on who else is in the batch (bit-identical).
//! `matmul_reference` is the portable path, used where VNNI is missing and as the tests' oracle.

use crate::send_ptr::SendPtr;
use half::f16;
use rayon::prelude::*;

/// Values per quantization block along K.
pub const BLOCK: usize = 32;
/// Output rows per packed tile.
pub const TILE_N: usize = 16;

/// One block of 32 K values for 16 output rows: `qs[g][r][j]` holds weight (row r, k = 4g + j) + 128.
#[derive(Clone)]
#[repr(C, align(64))]
struct Tile {
    qs: [[u8; 4 * TILE_N]; BLOCK / 4],
    scales: [f16; TILE_N],
}

/// A weight matrix of `n` outputs × `k` inputs, packed for the kernel.
pub struct PackedWeight {
    n: usize,
    k: usize,
    /// `[n_tiles][k_blocks]`
    tiles: Vec<Tile>,
}

/// Activations quantized per row and per block of 32: signed values, their scale, and the
/// `128 · Σq` correction that the unsigned weight offset adds to every block dot product.
#[derive(Default)]
pub struct QuantizedRows {
    m: usize,
    k_blocks: usize,
    qs: Vec<i8>,
    scales: Vec<f32>,
    corrections: Vec<i32>,
}

impl PackedWeight {
    /// Quantizes a row-major `n × k` f32 matrix (row i = output i). `k` must be a multiple of 32.
    pub fn from_f32(data: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(data.len(), n * k, "weight data does not match {n}x{k}");
        assert!(
            k.is_multiple_of(BLOCK),
            "k = {k} is not a multiple of {BLOCK}"
        );
        let k_blocks = k / BLOCK;
        let n_tiles = n.div_ceil(TILE_N);
        let empty = Tile {
            qs: [[128u8; 4 * TILE_N]; BLOCK / 4],
            scales: [f16::ZERO; TILE_N],
        };
        let mut tiles = vec![empty; n_tiles * k_blocks];
        for row in 0..n {
            let (t, r) = (row / TILE_N, row % TILE_N);
            for kb in 0..k_blocks {
                let vals = &data[row * k + kb * BLOCK..row * k + (kb + 1) * BLOCK];
                let amax = vals.iter().fold(0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
                let tile = &mut tiles[t * k_blocks + kb];
                tile.scales[r] = f16::from_f32(d);
                for (i, v) in vals.iter().enumerate() {
                    let q = (v * inv).round().clamp(-127.0, 127.0) as i32;
                    tile.qs[i / 4][r * 4 + i % 4] = (q + 128) as u8;
                }
            }
        }
        Self { n, k, tiles }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes the kernel streams per full pass over the weights.
    pub fn size_in_bytes(&self) -> usize {
        self.tiles.len() * std::mem::size_of::<Tile>()
    }

    /// The dequantized weights of one output row (used for embedding lookups).
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let k_blocks = self.k / BLOCK;
        let (t, r) = (row / TILE_N, row % TILE_N);
        for kb in 0..k_blocks {
            let tile = &self.tiles[t * k_blocks + kb];
            let d = tile.scales[r].to_f32();
            for i in 0..BLOCK {
                out[kb * BLOCK + i] = (tile.qs[i / 4][r * 4 + i % 4] as i32 - 128) as f32 * d;
            }
        }
    }
}

impl QuantizedRows {
    /// Quantizes `m` rows of `k` values (row-major) into `self`, reusing its buffers.
    pub fn quantize(&mut self, x: &[f32], m: usize, k: usize) {
        assert!(k.is_multiple_of(BLOCK) && x.len() >= m * k);
        let k_blocks = k / BLOCK;
        self.m = m;
        self.k_blocks = k_blocks;
        self.qs.resize(m * k, 0);
        self.scales.resize(m * k_blocks, 0.0);
        self.corrections.resize(m * k_blocks, 0);
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
        }
    }

    pub fn rows(&self) -> usize {
        self.m
    }
}

/// Which implementation `matmul` runs on this CPU.
pub fn kernel_name() -> &'static str {
    if has_vnni() {
        "avx512-vnni"
    } else {
        "portable"
    }
}

fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *VNNI.get_or_init(|| {
            // Miri cannot run AVX-512 intrinsics; it checks the portable path.
            !cfg!(miri)
                && std::env::var_os("BRAID_PORTABLE_KERNEL").is_none()
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vnni")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// `out[m][n] = Σ_k x[m][k] · w[n][k]` for all rows of `x`, split across the rayon pool by output tiles.
pub fn matmul(x: &QuantizedRows, w: &PackedWeight, out: &mut [f32]) {
    let (m, n) = (x.m, w.n);
    assert_eq!(
        x.k_blocks * BLOCK,
        w.k,
        "activation width does not match the weight"
    );
    assert!(out.len() >= m * n);
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
        #[cfg(target_arch = "x86_64")]
        if has_vnni() {
            // SAFETY: VNNI is present; `out` holds `m * n` floats (asserted above) and outlives
            // the loop. Task `c` writes only the columns of tiles `tiles`, and the tasks' tile
            // ranges do not overlap, so no element is written by two tasks or read by any.
            unsafe { vnni::matmul_tiles(x, w, tiles, out.get()) };
            return;
        }
        // SAFETY: as for the VNNI path: `m * n` floats, and this task's tiles are its own.
        unsafe { reference_tiles(x, w, tiles, out.get()) };
    });
}

/// The portable path: identical arithmetic to the VNNI kernel, one element at a time.
pub fn matmul_reference(x: &QuantizedRows, w: &PackedWeight, out: &mut [f32]) {
    assert!(out.len() >= x.m * w.n);
    // SAFETY: `out` holds `m * n` floats and is borrowed mutably for the call, so nothing
    // else reads or writes it meanwhile.
    unsafe { reference_tiles(x, w, 0..w.n.div_ceil(TILE_N), out.as_mut_ptr()) };
}

/// Writes `out[row * n + col]` for every row and every column `col` of the tiles `tiles` (the
/// 16 columns from `16 · tile`, fewer in a last partial tile), and nothing else.
///
/// # Safety
///
/// `out` must be valid for writes of `x.rows() * w.n()` floats, and no one else may read or
/// write the elements this call writes until it returns.
unsafe fn reference_tiles(
    x: &QuantizedRows,
    w: &PackedWeight,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    let (m, n, kbs) = (x.m, w.n, x.k_blocks);
    for t in tiles {
        for row in 0..m {
            for r in 0..TILE_N.min(n - t * TILE_N) {
                let mut acc = 0f32;
                for kb in 0..kbs {
                    let tile = &w.tiles[t * kbs + kb];
                    let a = &x.qs[(row * kbs + kb) * BLOCK..(row * kbs + kb + 1) * BLOCK];
                    let mut dot = 0i32;
                    for (i, &av) in a.iter().enumerate() {
                        dot += tile.qs[i / 4][r * 4 + i % 4] as i32 * av as i32;
                    }
                    let scale = tile.scales[r].to_f32() * x.scales[row * kbs + kb];
                    acc = ((dot - x.corrections[row * kbs + kb]) as f32).mul_add(scale, acc);
                }
                // SAFETY: `row < m` and `t * TILE_N + r < n`, so the element is inside the
                // `m * n` the caller vouches for, and it is in one of this call's tiles.
                unsafe { out.add(row * n + t * TILE_N + r).write(acc) };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{PackedWeight, QuantizedRows, BLOCK, TILE_N};
    use std::arch::x86_64::*;

    /// Rows of activations processed together per weight load.
    const MR: usize = 4;
    /// Rows per panel (a multiple of MR).
    const MB: usize = 64;

    /// The VNNI kernel for the tiles `tiles`: writes exactly what
    /// [`super::reference_tiles`] writes, with the same values.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F, AVX-512BW, AVX-512 VNNI and F16C. `out` must be valid for
    /// writes of `x.rows() * w.n()` floats, and no one else may read or write the elements this
    /// call writes until it returns.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    pub unsafe fn matmul_tiles(
        x: &QuantizedRows,
        w: &PackedWeight,
        tiles: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        let (m, n, kbs) = (x.m, w.n, x.k_blocks);
        // Rows in panels small enough for their activations to stay in L2 while the panel
        // meets every weight tile of this task; the remainder rows take the 1-row path,
        // which computes each element in the same order (results do not depend on `m`).
        for panel in (0..m).step_by(MB) {
            let end = (panel + MB).min(m);
            for t in tiles.clone() {
                let tile_row = &w.tiles[t * kbs..(t + 1) * kbs];
                let valid = TILE_N.min(n - t * TILE_N);
                let mask: __mmask16 = if valid == TILE_N {
                    0xFFFF
                } else {
                    (1u16 << valid) - 1
                };
                let mut row = panel;
                // `row + MR <= end <= m`, `tile_row` is tile `t`'s `kbs` blocks, and `mask`
                // stops at column `n`: what `rows_tile` needs, with `out` from our caller.
                while row + MR <= end {
                    rows_tile::<MR, 2>(x, tile_row, row, kbs, out, n, t, mask);
                    row += MR;
                }
                while row < end {
                    rows_tile::<1, 4>(x, tile_row, row, kbs, out, n, t, mask);
                    row += 1;
                }
            }
        }
    }

    /// Rows `row0..row0 + R` times weight tile `t` (whose blocks are `tile_row`): writes the
    /// columns of `mask`, counted from `16 · t`, of those rows.
    ///
    /// # Safety
    ///
    /// The CPU features of [`matmul_tiles`]; `row0 + R <= x.rows()`, `tile_row.len() == kbs ==
    /// x.k_blocks`, and `mask` covers only columns below `n`. `out` must be valid for writes of
    /// `x.rows() * n` floats, and no one else may read or write the elements this call writes.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn rows_tile<const R: usize, const A: usize>(
        x: &QuantizedRows,
        tile_row: &[super::Tile],
        row0: usize,
        kbs: usize,
        out: *mut f32,
        n: usize,
        t: usize,
        mask: __mmask16,
    ) {
        let mut facc = [_mm512_setzero_ps(); R];
        let qs = x.qs.as_ptr();
        for (kb, tile) in tile_row.iter().enumerate() {
            let wscale =
                _mm512_cvtph_ps(_mm256_loadu_si256(tile.scales.as_ptr() as *const __m256i));
            // A independent integer accumulators per row shorten the chain of dependent
            // `vpdpbusd`s (one row alone would otherwise wait on each); integer sums are exact,
            // so how the groups are split does not change the result.
            let mut iacc = [[_mm512_setzero_si512(); R]; A];
            for g in (0..BLOCK / 4).step_by(A) {
                for (j, accs) in iacc.iter_mut().enumerate() {
                    let wv = _mm512_load_si512(tile.qs[g + j].as_ptr() as *const __m512i);
                    for (r, acc) in accs.iter_mut().enumerate() {
                        // In bounds: row `row0 + r < m`, block `kb < kbs`, bytes `4(g + j)..+4`
                        // of its 32.
                        let a = qs.add(((row0 + r) * kbs + kb) * BLOCK + (g + j) * 4) as *const i32;
                        *acc = _mm512_dpbusd_epi32(*acc, wv, _mm512_set1_epi32(a.read_unaligned()));
                    }
                }
            }
            for (r, total) in facc.iter_mut().enumerate() {
                // Below `m * kbs`, the length of `corrections` and `scales`.
                let b = (row0 + r) * kbs + kb;
                let corr = _mm512_set1_epi32(*x.corrections.get_unchecked(b));
                let mut acc = iacc[0][r];
                for accs in &iacc[1..] {
                    acc = _mm512_add_epi32(acc, accs[r]);
                }
                let f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, corr));
                let s = _mm512_mul_ps(wscale, _mm512_set1_ps(*x.scales.get_unchecked(b)));
                *total = _mm512_fmadd_ps(f, s, *total);
            }
        }
        for (r, total) in facc.iter().enumerate() {
            // The masked store touches only the lanes of `mask`: a last partial tile does not
            // spill into the next row's first columns, which may be another task's.
            let dst = out.add((row0 + r) * n + t * TILE_N);
            _mm512_mask_storeu_ps(dst, mask, *total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    fn f32_matmul(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| x[i * k + p] * w[j * k + p]).sum();
            }
        }
        out
    }

    /// Partial tiles, several tasks per matmul and the model's own widths; under Miri, which
    /// runs the model's widths too slowly, small ones that still have partial tiles.
    const SHAPES: &[(usize, usize, usize)] = if cfg!(miri) {
        &[(1, 16, 32), (3, 40, 64), (5, 72, 32)]
    } else {
        &[
            (1, 16, 32),
            (3, 40, 64),
            (9, 960, 576),
            (17, 576, 1536),
            (64, 48, 96),
        ]
    };

    #[test]
    fn kernel_matches_reference_and_f32() {
        for &(m, n, k) in SHAPES {
            let w = random(n * k, 1);
            let x = random(m * k, 2);
            let packed = PackedWeight::from_f32(&w, n, k);
            let mut q = QuantizedRows::default();
            q.quantize(&x, m, k);
            let mut fast = vec![0f32; m * n];
            let mut slow = vec![0f32; m * n];
            matmul(&q, &packed, &mut fast);
            matmul_reference(&q, &packed, &mut slow);
            let exact = f32_matmul(&x, &w, m, n, k);
            for i in 0..m * n {
                assert!(
                    (fast[i] - slow[i]).abs() <= 1e-4 * (1.0 + slow[i].abs()),
                    "{m}x{n}x{k} [{i}]: {} vs {}",
                    fast[i],
                    slow[i]
                );
                // 8-bit weights and activations: each product is off by ~0.002 (std), random in
                // sign, so a sum of k is off by ~0.002·sqrt(k); allow six standard deviations.
                let tol = 0.012 * (k as f32).sqrt();
                assert!(
                    (fast[i] - exact[i]).abs() < tol,
                    "{m}x{n}x{k} [{i}]: {} vs f32 {}",
                    fast[i],
                    exact[i]
                );
            }
        }
    }

    #[test]
    fn rows_do_not_depend_on_batch() {
        // Fewer rows and a narrower K under Miri, which runs the full size too slowly.
        let (m, n, k) = if cfg!(miri) {
            (7, 40, 64)
        } else {
            (77, 48, 576)
        };
        let w = PackedWeight::from_f32(&random(n * k, 3), n, k);
        let x = random(m * k, 4);
        let mut q = QuantizedRows::default();
        q.quantize(&x, m, k);
        let mut all = vec![0f32; m * n];
        matmul(&q, &w, &mut all);
        for row in 0..m {
            let mut one = QuantizedRows::default();
            one.quantize(&x[row * k..(row + 1) * k], 1, k);
            let mut out = vec![0f32; n];
            matmul(&one, &w, &mut out);
            assert_eq!(
                out,
                all[row * n..(row + 1) * n],
                "row {row} differs when batched"
            );
        }
    }

    #[test]
    fn dequantize_row_round_trips() {
        let (n, k) = (20, 64);
        let w = random(n * k, 5);
        let packed = PackedWeight::from_f32(&w, n, k);
        let mut row = vec![0f32; k];
        for r in 0..n {
            packed.dequantize_row(r, &mut row);
            for i in 0..k {
                // Half a quantization step, plus the f16 rounding of the block scale.
                assert!((row[i] - w[r * k + i]).abs() <= 1.0 / 254.0 + 1e-3);
            }
        }
    }
}
