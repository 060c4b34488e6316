//! The int8 weight format: `y = x · Wᵀ` with int8 weights and int8 activations.
//!
//! Why braid has its own kernels: candle runs the default model's Q4_1 matmuls on a scalar path
//! whose speed does not grow with the batch, and its Q8_0 path stops gaining after a few rows,
//! because it re-reads every weight block for every activation row (`braid bench-engine
//! --compare-kernels` times both against braid's). A serving step carries many rows (16 decodes, or a
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
//! `reference_tiles` is the portable path, used where no vector kernel runs and as the tests'
//! oracle.

use super::int5::five_bit_integers;
use super::{QuantizedRows, BLOCK, TILE_N};
use half::f16;

/// One block of 32 K values for 16 output rows: `qs[g][r][j]` holds weight (row r, k = 4g + j) + 128.
#[derive(Clone)]
#[repr(C, align(64))]
pub(super) struct Tile {
    pub(super) qs: [[u8; 4 * TILE_N]; BLOCK / 4],
    pub(super) scales: [f16; TILE_N],
}

/// GGUF block types whose weights are int8 with one half-float scale per 32, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8Source {
    /// 34 bytes: `d` (f16), 32 signed bytes; weight `d · q`.
    Q8_0,
    /// 22 bytes: `d` (f16), 32 high bits, 16 bytes of low nibbles; weight `d · (q - 16)`.
    Q5_0,
}

impl Int8Source {
    fn block_bytes(self) -> usize {
        match self {
            Int8Source::Q8_0 => 34,
            Int8Source::Q5_0 => 22,
        }
    }

    /// A block's 32 integers, in order (ggml's dequantization without the scale).
    fn integers(self, block: &[u8]) -> [i8; BLOCK] {
        match self {
            Int8Source::Q8_0 => std::array::from_fn(|e| block[2 + e] as i8),
            Int8Source::Q5_0 => five_bit_integers(&block[2..22]).map(|q| q as i8 - 16),
        }
    }
}

/// A weight matrix of `n` outputs × `k` inputs, packed for the kernel.
pub struct Int8Weight {
    pub(super) n: usize,
    pub(super) k: usize,
    /// `[n_tiles][k_blocks]`
    pub(super) tiles: Vec<Tile>,
}

impl Int8Weight {
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

    /// Packs GGUF tensors whose blocks are already int8 with one scale per 32 (Q8_0) or fit in
    /// int8 exactly (Q5_0's `d · (q - 16)`), stacked: `parts` are each tensor's block type and
    /// rows in order, and `raw` their blocks end to end. The scales and integers are copied, so
    /// the weights are the file's, with no second rounding, whichever types the stack mixes.
    pub fn from_gguf(parts: &[(Int8Source, usize)], raw: &[u8], k: usize) -> Self {
        assert!(
            k.is_multiple_of(BLOCK),
            "k = {k} is not a multiple of {BLOCK}"
        );
        let k_blocks = k / BLOCK;
        let n: usize = parts.iter().map(|&(_, rows)| rows).sum();
        let lengths = parts
            .iter()
            .map(|&(s, rows)| rows * k_blocks * s.block_bytes());
        assert_eq!(
            raw.len(),
            lengths.clone().sum::<usize>(),
            "{parts:?} data does not match {n}x{k}"
        );
        let empty = Tile {
            qs: [[128u8; 4 * TILE_N]; BLOCK / 4],
            scales: [f16::ZERO; TILE_N],
        };
        let mut tiles = vec![empty; n.div_ceil(TILE_N) * k_blocks];
        let (mut first_row, mut at) = (0, 0);
        for (&(source, rows), length) in parts.iter().zip(lengths) {
            for (i, block) in raw[at..at + length]
                .chunks_exact(source.block_bytes())
                .enumerate()
            {
                let (row, kb) = (first_row + i / k_blocks, i % k_blocks);
                let (t, r) = (row / TILE_N, row % TILE_N);
                let tile = &mut tiles[t * k_blocks + kb];
                tile.scales[r] = f16::from_le_bytes([block[0], block[1]]);
                for (e, q) in source.integers(block).iter().enumerate() {
                    tile.qs[e / 4][r * 4 + e % 4] = (*q as i32 + 128) as u8;
                }
            }
            (first_row, at) = (first_row + rows, at + length);
        }
        Self { n, k, tiles }
    }

    /// Bytes the kernel streams per full pass over the weights.
    pub fn size_in_bytes(&self) -> usize {
        self.tiles.len() * std::mem::size_of::<Tile>()
    }

    /// The dequantized weights of one output row (used for embedding lookups).
    #[inline(always)]
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

/// The portable reference: every kernel's arithmetic, one element at a time.
impl crate::format_tile::FormatTile for Tile {
    unsafe fn reference_tiles(
        x: &QuantizedRows,
        weights: &[Tile],
        n: usize,
        tiles: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        let (m, kbs) = (x.m, x.k_blocks);
        for t in tiles {
            for row in 0..m {
                for r in 0..TILE_N.min(n - t * TILE_N) {
                    let mut acc = 0f32;
                    for kb in 0..kbs {
                        let tile = &weights[t * kbs + kb];
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format_checks::{
        assert_amx_code_matches_reference, assert_avx_vnni_code_matches_reference,
        assert_every_kernel_matches_reference, assert_rows_do_not_depend_on_batch, random,
    };
    use crate::{matmul_reference, PackedWeight};

    /// Q8_0 and Q5_0 blocks from ggml's own quantizer (through candle), alone and stacked
    /// together, dequantize to exactly ggml's values.
    #[cfg(not(any(miri, braid_emulated)))]
    #[test]
    fn q8_0_and_q5_0_blocks_are_copied_exactly() {
        use candle_core::quantized::{GgmlDType, QTensor};
        use rand::{Rng, SeedableRng};
        let (n, k) = (37, 96);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let data: Vec<f32> = (0..n * k).map(|_| rng.random_range(-2.0f32..2.0)).collect();
        let device = candle_core::Device::Cpu;
        let t = candle_core::Tensor::from_slice(&data, (n, k), &device).unwrap();
        let mut stack = (Vec::new(), Vec::new(), Vec::new());
        for (dtype, source) in [
            (GgmlDType::Q8_0, Int8Source::Q8_0),
            (GgmlDType::Q5_0, Int8Source::Q5_0),
        ] {
            let q = QTensor::quantize(&t, dtype).unwrap();
            let want = q
                .dequantize(&device)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f32>())
                .unwrap();
            let raw = q.data().unwrap();
            let w = Int8Weight::from_gguf(&[(source, n)], &raw, k);
            let mut row = vec![0f32; k];
            for r in 0..n {
                w.dequantize_row(r, &mut row);
                assert_eq!(row, want[r * k..(r + 1) * k], "{source:?} row {r}");
            }
            stack.0.push((source, n));
            stack.1.extend_from_slice(&raw);
            stack.2.extend(want);
        }
        let (parts, raw, want) = stack;
        let w = Int8Weight::from_gguf(&parts, &raw, k);
        let mut row = vec![0f32; k];
        for r in 0..2 * n {
            w.dequantize_row(r, &mut row);
            assert_eq!(row, want[r * k..(r + 1) * k], "stacked row {r}");
        }
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

    /// Partial tiles (n not a multiple of 16), row counts that are not multiples of the
    /// kernels' 4-row step nor of their 64-row panel (1, 3, 9, 17, 257), several tasks per
    /// matmul, and the model's own widths. Under Miri, which runs the model's widths too
    /// slowly, small ones that still have partial tiles.
    const SHAPES: &[(usize, usize, usize)] = if cfg!(miri) {
        &[(1, 16, 32), (3, 40, 64), (5, 72, 32)]
    } else {
        &[
            (1, 16, 32),
            (1, 8, 64),
            (3, 40, 64),
            (9, 960, 576),
            (17, 576, 1536),
            (64, 48, 96),
            (257, 88, 128),
        ]
    };

    fn inputs(m: usize, n: usize, k: usize) -> (Vec<f32>, Vec<f32>, PackedWeight, QuantizedRows) {
        let w = random(n * k, 1);
        let x = random(m * k, 2);
        let packed = PackedWeight::from_f32(&w, n, k);
        let mut q = QuantizedRows::default();
        q.quantize(&x, m, k);
        (w, x, packed, q)
    }

    #[test]
    fn reference_is_close_to_f32() {
        for &(m, n, k) in SHAPES {
            let (w, x, packed, q) = inputs(m, n, k);
            let mut slow = vec![0f32; m * n];
            matmul_reference(&q, &packed, &mut slow);
            let exact = f32_matmul(&x, &w, m, n, k);
            for i in 0..m * n {
                // 8-bit weights and activations: each product is off by ~0.002 (std), random in
                // sign, so a sum of k is off by ~0.002·sqrt(k); allow six standard deviations.
                let tol = 0.012 * (k as f32).sqrt();
                assert!(
                    (slow[i] - exact[i]).abs() < tol,
                    "{m}x{n}x{k} [{i}]: {} vs f32 {}",
                    slow[i],
                    exact[i]
                );
            }
        }
    }

    #[test]
    fn every_kernel_is_bit_identical_to_the_reference() {
        for &(m, n, k) in SHAPES {
            let (_, _, packed, q) = inputs(m, n, k);
            assert_every_kernel_matches_reference(&q, &packed, "int8");
        }
    }

    /// The AMX kernel's code on the tile model (and its instructions where the CPU has them,
    /// in `every_kernel_…`), with full 16-row tiles, a partial one and both block parities.
    #[test]
    fn amx_kernel_code_is_bit_identical_on_the_tile_model() {
        for &(m, n, k) in SHAPES.iter().chain(&[(70, 40, 96), (32, 24, 64)]) {
            let (_, _, packed, q) = inputs(m, n, k);
            assert_amx_code_matches_reference(&q, &packed, "int8");
        }
    }

    /// The AVX-VNNI kernel's code with the EVEX form of its instruction, on CPUs that have
    /// AVX-512 VNNI but not AVX-VNNI (where `every_kernel_…` cannot run it).
    #[test]
    fn avx_vnni_kernel_code_is_bit_identical_with_the_evex_instruction() {
        for &(m, n, k) in SHAPES {
            let (_, _, packed, q) = inputs(m, n, k);
            assert_avx_vnni_code_matches_reference(&q, &packed, "int8");
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
        assert_rows_do_not_depend_on_batch(&random(m * k, 4), m, k, &w);
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
