//! The 5-bit weight format: Q5_0, Q5_1 and Q5_K tensors keep their 5 bits and their own scales.
//!
//! Why: quantized files of the Q4_K_M recipe store many layers as Q5_0 or Q5_K (Gemma 3 270M:
//! every Q, K, gate and up matrix, 63 M weights). Copied into int8 those stream 8.5 bits per
//! weight on every decode step; here they stream 6.
//!
//! Format: the 4-bit tile ([`int4::Tile`], the low four bits with the scales and minimums)
//! plus one bit plane: bit `4r + j` of `high[g]` is the fifth bit of row `r`'s weight at
//! `k = 4g + j`, the same position as that weight's byte in a 64-byte group vector. A kernel
//! unpacks the nibbles as for int4 and adds 16 where the plane says so: one masked add on
//! AVX-512, a bit-to-byte expansion on AVX2 and NEON. The integers are then 0..31, and the
//! arithmetic after the integer dot product is the 4-bit format's, so the weights the kernel
//! multiplies are exactly the file's (`d · q + m`; Q5_0's `d · (q - 16)` is `m = -16d`), and a
//! Q5_K's up to the half-float rounding of its sub-block scales.

use super::int4::{self, half_at, k_quant_scale_min, NibbleSource, NibbleTile, SubBlock};
use super::{QuantizedRows, BLOCK};
use half::f16;

/// One block of 32 K values for 16 output rows (see the module docs).
#[derive(Clone)]
#[repr(C, align(64))]
pub struct Tile {
    pub(super) low: int4::Tile,
    pub(super) high: [u64; BLOCK / 4],
}

/// A weight matrix in the 5-bit format.
pub type Int5Weight = int4::NibbleWeight<Tile>;

/// The GGUF block layouts this format takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int5Source {
    /// 32 weights in 22 bytes: `d` (f16), 32 fifth bits, 16 bytes of nibbles; weight
    /// `d · (q - 16)`.
    Q5_0,
    /// 32 weights in 24 bytes: `d` (f16), `m` (f16), 32 fifth bits, 16 bytes of nibbles;
    /// weight `d · q + m`.
    Q5_1,
    /// 256 weights in 176 bytes: `d` and `dmin` (f16), 12 bytes of 6-bit scales and minimums
    /// for the 8 sub-blocks of 32, 32 bytes of fifth bits, 128 bytes of nibbles; weight
    /// `d·sc · q - dmin·mn`, with the sub-block scales rounded to half floats as for Q4_K.
    Q5K,
}

/// The 32 unsigned integers of a Q5_0 or Q5_1 block from its last 20 bytes: 4 bytes of fifth
/// bits (bit `e` for element `e`), then 16 bytes holding elements 0..16 in the low nibbles and
/// 16..32 in the high ones.
pub(super) fn five_bit_integers(bits_and_nibbles: &[u8]) -> [u8; BLOCK] {
    let (qh, qs) = bits_and_nibbles.split_at(4);
    let qh = u32::from_le_bytes(qh.try_into().expect("4 bytes"));
    std::array::from_fn(|e| {
        let low = (qs[e % 16] >> (4 * (e / 16))) & 15;
        low | ((((qh >> e) & 1) as u8) << 4)
    })
}

impl NibbleSource for Int5Source {
    fn block_weights(self) -> usize {
        match self {
            Int5Source::Q5_0 | Int5Source::Q5_1 => 32,
            Int5Source::Q5K => 256,
        }
    }

    fn block_bytes(self) -> usize {
        match self {
            Int5Source::Q5_0 => 22,
            Int5Source::Q5_1 => 24,
            Int5Source::Q5K => 176,
        }
    }

    fn sub_blocks(self, block: &[u8]) -> Vec<SubBlock> {
        match self {
            Int5Source::Q5_0 => {
                let d = half_at(block, 0);
                let q = five_bit_integers(&block[2..22]);
                vec![(d, f16::from_f32(-16.0 * d.to_f32()), q)]
            }
            Int5Source::Q5_1 => {
                let q = five_bit_integers(&block[4..24]);
                vec![(half_at(block, 0), half_at(block, 2), q)]
            }
            Int5Source::Q5K => {
                let (qh, qs) = (&block[16..48], &block[48..176]);
                (0..8)
                    .map(|j| {
                        let (scale, min) = k_quant_scale_min(block, j);
                        // Sub-blocks 2i and 2i + 1 share 32 bytes of nibbles (low and high);
                        // every sub-block's fifth bits are bit j of the same 32 bytes.
                        let nibbles = &qs[32 * (j / 2)..][..32];
                        let q = std::array::from_fn(|e| {
                            let low = (nibbles[e] >> (4 * (j % 2))) & 15;
                            low | (((qh[e] >> j) & 1) << 4)
                        });
                        (scale, min, q)
                    })
                    .collect()
            }
        }
    }
}

impl NibbleTile for Tile {
    type Source = Int5Source;
    const EMPTY: Self = Tile {
        low: int4::Tile::EMPTY,
        high: [0; BLOCK / 4],
    };

    fn low(&self) -> &int4::Tile {
        &self.low
    }

    fn set(&mut self, r: usize, sub: &SubBlock) {
        self.low.set(r, sub);
        for (e, q) in sub.2.iter().enumerate() {
            let (g, j) = (e / 4, e % 4);
            self.high[g] |= u64::from(q >> 4) << (4 * r + j);
        }
    }

    #[inline(always)]
    fn weight(&self, r: usize, e: usize) -> u8 {
        let (g, j) = (e / 4, e % 4);
        self.low.weight(r, e) | ((((self.high[g] >> (4 * r + j)) & 1) as u8) << 4)
    }
}

impl crate::format_tile::FormatTile for Tile {
    unsafe fn reference_tiles(
        x: &QuantizedRows,
        weights: &[Tile],
        n: usize,
        tiles: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        // SAFETY: the caller's guarantees are the ones the shared reference needs.
        unsafe { int4::nibble_reference_tiles(x, weights, n, tiles, out) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format_checks::{
        assert_amx_code_matches_reference, assert_avx_vnni_code_matches_reference,
        assert_every_kernel_matches_reference, assert_rows_do_not_depend_on_batch, bits, quantized,
        random,
    };
    use crate::{matmul_reference, matmul_with, Kernel, PackedWeight};
    use rand::{Rng, SeedableRng};

    const SOURCES: [Int5Source; 3] = [Int5Source::Q5_0, Int5Source::Q5_1, Int5Source::Q5K];

    /// Valid `source` blocks for an `n × k` matrix: random integers, fifth bits and 6-bit
    /// scales, with half-float scales of the size a model's weights have. (Any bytes are a
    /// valid block once its half floats are finite.)
    fn random_blocks(source: Int5Source, n: usize, k: usize, seed: u64) -> Vec<u8> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut raw = Vec::new();
        for _ in 0..n * k / source.block_weights() {
            let mut block: Vec<u8> = (0..source.block_bytes()).map(|_| rng.random()).collect();
            // A K-quant's `d` multiplies 6-bit sub-block scales, and its `dmin` is subtracted.
            let (scale, min) = match source {
                Int5Source::Q5_0 => (rng.random_range(0.001f32..0.06), None),
                Int5Source::Q5_1 => (
                    rng.random_range(0.001f32..0.06),
                    Some(rng.random_range(-1.0f32..0.0)),
                ),
                Int5Source::Q5K => (
                    rng.random_range(0.0005f32..0.002),
                    Some(rng.random_range(0.0f32..0.02)),
                ),
            };
            block[..2].copy_from_slice(&f16::from_f32(scale).to_le_bytes());
            if let Some(min) = min {
                block[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
            }
            raw.extend(block);
        }
        raw
    }

    /// Shapes as in the 4-bit tests (`k` a multiple of 256 for Q5_K): partial tiles, row
    /// counts that are not multiples of the kernels' steps, several tasks per matmul, the
    /// model's widths; small ones under Miri.
    const SHAPES: &[(usize, usize, usize)] = if cfg!(miri) {
        &[(1, 16, 256), (5, 40, 256)]
    } else {
        &[
            (1, 16, 256),
            (1, 8, 512),
            (3, 40, 256),
            (9, 640, 1024),
            (17, 256, 640 * 4),
            (64, 48, 256),
            (257, 88, 256),
        ]
    };

    fn inputs(m: usize, n: usize, k: usize, source: Int5Source) -> (PackedWeight, QuantizedRows) {
        let raw = random_blocks(source, n, k, (m * n + k) as u64);
        let w = PackedWeight::Int5(Int5Weight::from_gguf(source, &raw, n, k));
        (w, quantized(&random(m * k, 2), m, k))
    }

    /// ggml's dequantization (through candle) of every block layout: the fifth bits, the
    /// nibbles and the scales land where ggml puts them.
    #[cfg(not(any(miri, braid_emulated)))]
    #[test]
    fn rows_dequantize_to_ggmls_values() {
        use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType};
        let (n, k) = (20, 512);
        for source in SOURCES {
            let raw = random_blocks(source, n, k, 5);
            let dtype = match source {
                Int5Source::Q5_0 => GgmlDType::Q5_0,
                Int5Source::Q5_1 => GgmlDType::Q5_1,
                Int5Source::Q5K => GgmlDType::Q5K,
            };
            let device = candle_core::Device::Cpu;
            let exact = qtensor_from_ggml(dtype, &raw, vec![n, k], &device)
                .and_then(|q| q.dequantize(&device))
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f32>())
                .unwrap();
            let w = Int5Weight::from_gguf(source, &raw, n, k);
            let mut row = vec![0f32; k];
            for r in 0..n {
                w.dequantize_row(r, &mut row);
                for (i, (&got, &want)) in row.iter().zip(&exact[r * k..]).enumerate() {
                    // Q5_0 and Q5_1: `d · q + m` in f32 as ggml computes it, up to the order of
                    // two roundings. Q5_K: the sub-block scale and minimum rounded to half
                    // floats, at most 2⁻¹¹ of each: 2⁻¹¹ · (31 · 0.002 · 63 + 0.02 · 63) ≈ 0.0025.
                    // A misplaced fifth bit is off by 16 steps, a misplaced nibble by several.
                    let tol = match source {
                        Int5Source::Q5K => 3e-3,
                        _ => 1e-6 * want.abs().max(1.0),
                    };
                    assert!(
                        (got - want).abs() <= tol,
                        "{source:?} [{r}][{i}]: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_kernel_is_bit_identical_to_the_reference() {
        for source in SOURCES {
            for &(m, n, k) in SHAPES {
                let (w, q) = inputs(m, n, k, source);
                assert_every_kernel_matches_reference(&q, &w, &format!("{source:?} x{k}"));
            }
        }
    }

    /// The AMX kernel's code on the tile model (and its instructions where the CPU has them,
    /// in `every_kernel_…`), with full 16-row tiles, a partial one and both block parities.
    #[test]
    fn amx_kernel_code_is_bit_identical_on_the_tile_model() {
        for &(m, n, k) in SHAPES.iter().chain(&[(70, 40, 96), (32, 24, 64)]) {
            let (w, q) = inputs(m, n, k, Int5Source::Q5_0);
            assert_amx_code_matches_reference(&q, &w, "Q5_0");
        }
    }

    /// The AVX-VNNI code path with the EVEX instruction, as in the int8 tests.
    #[test]
    fn avx_vnni_kernel_code_is_bit_identical_with_the_evex_instruction() {
        for &(m, n, k) in SHAPES {
            let (w, q) = inputs(m, n, k, Int5Source::Q5_0);
            assert_avx_vnni_code_matches_reference(&q, &w, "Q5_0");
        }
    }

    /// Every weight 31 and every activation 127: the largest sums a block can hold, which
    /// would overflow a kernel that kept the AVX2 pairs in 16 bits for a whole block. A few rows
    /// meet the packed blocks, a panel of many rows the unpacked ones.
    #[test]
    fn the_largest_integers_do_not_overflow_any_kernel() {
        let (n, k) = (32, 256);
        let mut block = vec![0xFFu8; Int5Source::Q5_1.block_bytes()];
        block[..2].copy_from_slice(&f16::from_f32(0.01).to_le_bytes());
        block[2..4].copy_from_slice(&f16::ZERO.to_le_bytes());
        let raw = block.repeat(n * k / BLOCK);
        let w = PackedWeight::Int5(Int5Weight::from_gguf(Int5Source::Q5_1, &raw, n, k));
        for m in [5, 70] {
            let q = quantized(&vec![1.0; m * k], m, k);
            let mut slow = vec![0f32; m * n];
            matmul_reference(&q, &w, &mut slow);
            // 31 · 0.01 per weight, times k ones.
            let want = 31.0 * 0.01 * k as f32;
            assert!(
                slow.iter().all(|v| (v - want).abs() < 1e-2 * want),
                "{slow:?}"
            );
            for kernel in Kernel::supported() {
                let mut fast = vec![0f32; m * n];
                matmul_with(kernel, &q, &w, &mut fast);
                assert_eq!(bits(&fast), bits(&slow), "{kernel}, {m} rows");
            }
        }
    }

    #[test]
    fn rows_do_not_depend_on_batch() {
        let (m, n, k) = if cfg!(miri) {
            (7, 40, 256)
        } else {
            (77, 48, 512)
        };
        let raw = random_blocks(Int5Source::Q5K, n, k, 3);
        let w = PackedWeight::Int5(Int5Weight::from_gguf(Int5Source::Q5K, &raw, n, k));
        assert_rows_do_not_depend_on_batch(&random(m * k, 4), m, k, &w);
    }
}
