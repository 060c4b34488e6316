//! The 4-bit weight format: Q4_0, Q4_1 and Q4_K tensors keep their 4 bits and their own scales.
//!
//! Why: a decode step reads every weight once, so a lone sequence is bound by the bytes the
//! weights take. Requantized to int8 the default model's layers stream 119 MB per token; kept at
//! 4 bits they stream 66 MB. Keeping the file's own values also removes a second rounding: the
//! weights the kernel multiplies are exactly the ones in a Q4_0 or Q4_1 GGUF (`d · q + m`), and
//! a Q4_K's up to the half-float rounding of its sub-block scales.
//!
//! Format: blocks of 32 along K (Q4_K's sub-blocks), packed in tiles of 16 output rows like the int8
//! format. Byte `qs[p][4r + j]` holds the weight of row `r` at `k = 4p + j` in its low nibble and
//! at `k = 16 + 4p + j` in its high one, so one vector load yields two vectors of 16 rows × 4 K
//! values after a mask and a shift, each ready for the same `vpdpbusd`/`sdot` as the int8
//! format. The nibbles are unsigned (0..15); each row's block has a scale `d` and a minimum `m`
//! (Q4_0's `d · (q - 8)` is `m = -8d`, exact in half precision), so a block contributes
//! `d_w · d_x · Σ q_w q_x + m_w · (d_x · Σ q_x)`: an exact integer sum, then two fused
//! multiply-adds whose order every kernel keeps, so every path writes the same bits.

use super::{QuantizedRows, BLOCK, TILE_N};
use half::f16;

/// One block of 32 K values for 16 output rows, two weights per byte (see the module docs).
#[derive(Clone)]
#[repr(C, align(64))]
pub(super) struct Tile {
    pub(super) qs: [[u8; 4 * TILE_N]; BLOCK / 8],
    pub(super) scales: [f16; TILE_N],
    pub(super) mins: [f16; TILE_N],
}

/// A weight matrix of `n` outputs × `k` inputs in the 4-bit format.
pub struct Int4Weight {
    pub(super) n: usize,
    pub(super) k: usize,
    /// `[n_tiles][k_blocks]`
    pub(super) tiles: Vec<Tile>,
}

/// The GGUF block layouts this format takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int4Source {
    /// 32 weights in 18 bytes: `d` (f16), 16 bytes of nibbles; weight `d · (q - 8)`.
    Q4_0,
    /// 32 weights in 20 bytes: `d` (f16), `m` (f16), 16 bytes of nibbles; weight `d · q + m`.
    Q4_1,
    /// 256 weights in 144 bytes: `d` and `dmin` (f16), 12 bytes of 6-bit scales and minimums
    /// for the 8 sub-blocks of 32, 128 bytes of nibbles; weight `d·sc · q - dmin·mn`. A
    /// sub-block's scale and minimum are products of two numbers, rounded here to half floats
    /// (a relative error of at most 2⁻¹¹ on the scale, far below the 4-bit step).
    Q4K,
}

impl Int4Source {
    /// Weights per block of the file.
    pub fn block_weights(self) -> usize {
        match self {
            Int4Source::Q4_0 | Int4Source::Q4_1 => 32,
            Int4Source::Q4K => 256,
        }
    }

    pub fn block_bytes(self) -> usize {
        match self {
            Int4Source::Q4_0 => 18,
            Int4Source::Q4_1 => 20,
            Int4Source::Q4K => 144,
        }
    }

    /// The file block `block`'s sub-blocks of 32, each as (scale, minimum, nibbles in order).
    fn sub_blocks(self, block: &[u8]) -> Vec<(f16, f16, [u8; BLOCK])> {
        let half = |i: usize| f16::from_le_bytes([block[i], block[i + 1]]);
        // 16 bytes holding elements 0..16 in the low nibbles and 16..32 in the high ones.
        let split = |bytes: &[u8]| std::array::from_fn(|e| (bytes[e % 16] >> (4 * (e / 16))) & 15);
        match self {
            Int4Source::Q4_0 => {
                let d = half(0);
                vec![(d, f16::from_f32(-8.0 * d.to_f32()), split(&block[2..18]))]
            }
            Int4Source::Q4_1 => vec![(half(0), half(2), split(&block[4..20]))],
            Int4Source::Q4K => {
                let (d, dmin) = (half(0).to_f32(), half(2).to_f32());
                let (scales, qs) = (&block[4..16], &block[16..144]);
                // ggml's `get_scale_min_k4`: 6-bit scale and minimum of sub-block j.
                let scale_min = |j: usize| {
                    if j < 4 {
                        (scales[j] & 63, scales[j + 4] & 63)
                    } else {
                        (
                            (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4),
                            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
                        )
                    }
                };
                (0..8)
                    .map(|j| {
                        let (sc, mn) = scale_min(j);
                        // Sub-blocks 2i and 2i + 1 share 32 bytes: low and high nibbles.
                        let bytes = &qs[32 * (j / 2)..][..32];
                        let nibbles = std::array::from_fn(|e| (bytes[e] >> (4 * (j % 2))) & 15);
                        let scale = f16::from_f32(d * sc as f32);
                        (scale, f16::from_f32(-(dmin * mn as f32)), nibbles)
                    })
                    .collect()
            }
        }
    }
}

impl Int4Weight {
    /// Packs a row-major `n × k` tensor stored as GGUF `source` blocks (`raw`, rows of
    /// `k / source.block_weights()` blocks). Panics if `raw` does not hold exactly that many.
    pub fn from_gguf(source: Int4Source, raw: &[u8], n: usize, k: usize) -> Self {
        let per = source.block_weights();
        assert!(k.is_multiple_of(per), "k = {k} is not a multiple of {per}");
        let (k_blocks, bytes) = (k / BLOCK, source.block_bytes());
        assert_eq!(
            raw.len(),
            n * (k / per) * bytes,
            "{source:?} data is not {n}x{k}"
        );
        let empty = Tile {
            qs: [[0u8; 4 * TILE_N]; BLOCK / 8],
            scales: [f16::ZERO; TILE_N],
            mins: [f16::ZERO; TILE_N],
        };
        let mut tiles = vec![empty; n.div_ceil(TILE_N) * k_blocks];
        for (row, raw_row) in raw.chunks_exact((k / per) * bytes).enumerate() {
            let (t, r) = (row / TILE_N, row % TILE_N);
            let subs = raw_row
                .chunks_exact(bytes)
                .flat_map(|b| source.sub_blocks(b));
            for (kb, (scale, min, nibbles)) in subs.enumerate() {
                let tile = &mut tiles[t * k_blocks + kb];
                tile.scales[r] = scale;
                tile.mins[r] = min;
                for (e, q) in nibbles.into_iter().enumerate() {
                    // Element e = 4g + j: groups 0..3 in the low nibbles, 4..7 in the high ones.
                    let (g, j) = (e / 4, e % 4);
                    tile.qs[g % 4][r * 4 + j] |= q << (4 * (g / 4));
                }
            }
        }
        Self { n, k, tiles }
    }

    /// Bytes the kernel streams per full pass over the weights.
    pub fn size_in_bytes(&self) -> usize {
        self.tiles.len() * std::mem::size_of::<Tile>()
    }

    /// The weight of row `r` of `tile` at position `e` of the block, as an unsigned nibble.
    #[inline(always)]
    fn nibble(tile: &Tile, r: usize, e: usize) -> u8 {
        let (g, j) = (e / 4, e % 4);
        (tile.qs[g % 4][r * 4 + j] >> (4 * (g / 4))) & 15
    }

    /// The dequantized weights of one output row (used for embedding lookups).
    #[inline(always)]
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let k_blocks = self.k / BLOCK;
        let (t, r) = (row / TILE_N, row % TILE_N);
        for kb in 0..k_blocks {
            let tile = &self.tiles[t * k_blocks + kb];
            let (d, m) = (tile.scales[r].to_f32(), tile.mins[r].to_f32());
            for e in 0..BLOCK {
                out[kb * BLOCK + e] = Self::nibble(tile, r, e) as f32 * d + m;
            }
        }
    }
}

/// The portable reference: every kernel's arithmetic, one element at a time.
impl super::packed_weight::FormatTile for Tile {
    unsafe fn reference_tiles(
        x: &QuantizedRows,
        weights: &[Tile],
        n: usize,
        tiles: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        let (m, kbs) = (x.m, x.k_blocks);
        // Each output is its blocks' sums in K order, as in every kernel; the loops run weight
        // block by weight block so that a block's nibbles are unpacked once for all rows.
        let mut acc = vec![0f32; m];
        for t in tiles {
            for r in 0..TILE_N.min(n - t * TILE_N) {
                acc.fill(0.0);
                for kb in 0..kbs {
                    let tile = &weights[t * kbs + kb];
                    let q: [i32; BLOCK] =
                        std::array::from_fn(|e| Int4Weight::nibble(tile, r, e) as i32);
                    let (d, min) = (tile.scales[r].to_f32(), tile.mins[r].to_f32());
                    for (row, acc) in acc.iter_mut().enumerate() {
                        let b = row * kbs + kb;
                        let a = &x.qs[b * BLOCK..(b + 1) * BLOCK];
                        let dot: i32 = a.iter().zip(&q).map(|(&a, &q)| a as i32 * q).sum();
                        *acc = (dot as f32).mul_add(d * x.scales[b], *acc);
                        *acc = min.mul_add(x.sums[b], *acc);
                    }
                }
                for (row, &acc) in acc.iter().enumerate() {
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
    use crate::kernels::{matmul_reference, matmul_with, Kernel, PackedWeight};
    use rand::{Rng, SeedableRng};

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    /// `data` (`n × k`) as GGUF `source` blocks, quantized here (the tests need valid blocks,
    /// not ggml's choice of them).
    fn blocks(data: &[f32], source: Int4Source) -> Vec<u8> {
        let mut raw = Vec::new();
        for vals in data.chunks(BLOCK) {
            let (lo, hi) = vals
                .iter()
                .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            let (d, m) = match source {
                Int4Source::Q4_0 => {
                    let d = lo.abs().max(hi.abs()) / 8.0;
                    (f16::from_f32(d), -8.0 * f16::from_f32(d).to_f32())
                }
                Int4Source::Q4_1 => (
                    (f16::from_f32((hi - lo) / 15.0)),
                    f16::from_f32(lo).to_f32(),
                ),
                Int4Source::Q4K => unreachable!("Q4_K blocks come from ggml's quantizer"),
            };
            raw.extend(d.to_le_bytes());
            if source == Int4Source::Q4_1 {
                raw.extend(f16::from_f32(m).to_le_bytes());
            }
            let inv = if d.to_f32() > 0.0 {
                1.0 / d.to_f32()
            } else {
                0.0
            };
            let q = |v: f32| ((v - m) * inv).round().clamp(0.0, 15.0) as u8;
            raw.extend((0..16).map(|i| q(vals[i]) | (q(vals[i + 16]) << 4)));
        }
        raw
    }

    /// ggml's dequantization of the blocks (through candle), for the format's own check.
    #[cfg(not(miri))]
    fn ggml_dequantized(raw: &[u8], n: usize, k: usize, source: Int4Source) -> Vec<f32> {
        use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType};
        let dtype = match source {
            Int4Source::Q4_0 => GgmlDType::Q4_0,
            Int4Source::Q4_1 => GgmlDType::Q4_1,
            Int4Source::Q4K => GgmlDType::Q4K,
        };
        let device = candle_core::Device::Cpu;
        let q = qtensor_from_ggml(dtype, raw, vec![n, k], &device).unwrap();
        q.dequantize(&device)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .unwrap()
    }

    /// As in the int8 tests: partial tiles, row counts that are not multiples of the kernels'
    /// steps, several tasks per matmul, and the model's widths; small ones under Miri.
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

    const SOURCES: [Int4Source; 2] = [Int4Source::Q4_0, Int4Source::Q4_1];

    /// Q4_K blocks as ggml's own quantizer (through candle) writes them, with ggml's
    /// dequantization: the format's sub-block decoding is checked against both. `k` must be a
    /// multiple of 256.
    #[cfg(not(miri))]
    fn ggml_q4k(data: &[f32], n: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
        use candle_core::quantized::{GgmlDType, QTensor};
        let t = candle_core::Tensor::from_slice(data, (n, k), &candle_core::Device::Cpu).unwrap();
        let raw = QTensor::quantize(&t, GgmlDType::Q4K)
            .unwrap()
            .data()
            .unwrap()
            .into_owned();
        let exact = ggml_dequantized(&raw, n, k, Int4Source::Q4K);
        (raw, exact)
    }

    /// Every row of `w` dequantizes to `exact` within `tol(value)`.
    #[cfg(not(miri))]
    fn assert_rows_dequantize_to(w: &Int4Weight, exact: &[f32], tol: impl Fn(f32) -> f32) {
        let mut row = vec![0f32; w.k];
        for r in 0..w.n {
            w.dequantize_row(r, &mut row);
            for (i, (&got, &want)) in row.iter().zip(&exact[r * w.k..]).enumerate() {
                assert!(
                    (got - want).abs() <= tol(want),
                    "[{r}][{i}]: {got} vs {want}"
                );
            }
        }
    }

    #[cfg(not(miri))]
    #[test]
    fn q4k_rows_dequantize_to_ggmls_values_within_the_half_float_scales() {
        let (n, k) = (20, 512);
        let (raw, exact) = ggml_q4k(&random(n * k, 6), n, k);
        let w = Int4Weight::from_gguf(Int4Source::Q4K, &raw, n, k);
        // The scale and minimum rounded to half floats: at most 2⁻¹¹ of each, so
        // 2⁻¹¹ · (15 · scale + |min|) ≈ 2⁻¹¹ · 3 for weights in [-1, 1]. A sub-block decoded
        // with another one's scale or nibbles is off by ~0.1 or more.
        assert_rows_dequantize_to(&w, &exact, |_| 1.5e-3);
    }

    #[cfg(not(miri))]
    #[test]
    fn q4k_on_every_kernel_is_bit_identical_to_the_reference() {
        for (m, n) in [(1, 40), (9, 48), (70, 16)] {
            let k = 512;
            let (raw, _) = ggml_q4k(&random(n * k, 7), n, k);
            let w = PackedWeight::Int4(Int4Weight::from_gguf(Int4Source::Q4K, &raw, n, k));
            let mut q = QuantizedRows::default();
            q.quantize(&random(m * k, 8), m, k);
            let mut slow = vec![0f32; m * n];
            matmul_reference(&q, &w, &mut slow);
            for kernel in Kernel::supported() {
                let mut fast = vec![f32::NAN; m * n];
                matmul_with(kernel, &q, &w, &mut fast);
                assert_eq!(bits(&fast), bits(&slow), "{kernel} on Q4_K {m}x{n}x{k}");
            }
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn inputs(m: usize, n: usize, k: usize, source: Int4Source) -> (PackedWeight, QuantizedRows) {
        let raw = blocks(&random(n * k, 1), source);
        let w = PackedWeight::Int4(Int4Weight::from_gguf(source, &raw, n, k));
        let mut q = QuantizedRows::default();
        q.quantize(&random(m * k, 2), m, k);
        (w, q)
    }

    #[cfg(not(miri))]
    #[test]
    fn rows_dequantize_to_ggmls_values() {
        let (n, k) = (20, 96);
        for source in SOURCES {
            let raw = blocks(&random(n * k, 5), source);
            let exact = ggml_dequantized(&raw, n, k, source);
            let w = Int4Weight::from_gguf(source, &raw, n, k);
            // ggml computes `d · q + m` (or `d · (q - 8)`) in f32 as well; only the order of
            // the two roundings may differ.
            assert_rows_dequantize_to(&w, &exact, |want| 1e-6 * want.abs().max(1.0));
        }
    }

    #[test]
    fn reference_matches_the_dequantized_product() {
        for source in SOURCES {
            for &(m, n, k) in SHAPES {
                let raw = blocks(&random(n * k, 1), source);
                let w = Int4Weight::from_gguf(source, &raw, n, k);
                let mut exact_w = vec![0f32; n * k];
                for (r, row) in exact_w.chunks_mut(k).enumerate() {
                    w.dequantize_row(r, row);
                }
                let w = PackedWeight::Int4(w);
                let x = random(m * k, 2);
                let mut q = QuantizedRows::default();
                q.quantize(&x, m, k);
                let mut got = vec![0f32; m * n];
                matmul_reference(&q, &w, &mut got);
                for i in 0..m {
                    for j in 0..n {
                        let want: f32 = (0..k).map(|p| x[i * k + p] * exact_w[j * k + p]).sum();
                        // Only the activations are rounded (to 8 bits, ~0.004 each, random in
                        // sign): six standard deviations of a sum of k such errors.
                        let tol = 0.006 * (k as f32).sqrt();
                        let v = got[i * n + j];
                        assert!(
                            (v - want).abs() < tol,
                            "{source:?} {m}x{n}x{k} [{i}][{j}]: {v} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_kernel_is_bit_identical_to_the_reference() {
        for source in SOURCES {
            for &(m, n, k) in SHAPES {
                let (w, q) = inputs(m, n, k, source);
                let mut slow = vec![0f32; m * n];
                matmul_reference(&q, &w, &mut slow);
                for kernel in Kernel::supported() {
                    // A canary past the end: no kernel writes beyond `m * n`.
                    let mut fast = vec![f32::NAN; m * n + 1];
                    matmul_with(kernel, &q, &w, &mut fast);
                    assert_eq!(
                        bits(&fast[..m * n]),
                        bits(&slow),
                        "{kernel} on {source:?} {m}x{n}x{k}"
                    );
                    assert!(fast[m * n].is_nan(), "{kernel} wrote past {m}x{n}");
                }
            }
        }
    }

    /// The AVX-VNNI code path with the EVEX instruction, as in the int8 tests.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx_vnni_kernel_code_is_bit_identical_with_the_evex_instruction() {
        if cfg!(miri)
            || !(is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
                && Kernel::Avx2.is_supported())
        {
            eprintln!("skipped: this CPU has no AVX-512 VL + VNNI");
            return;
        }
        for &(m, n, k) in SHAPES {
            let (w, q) = inputs(m, n, k, Int4Source::Q4_1);
            let mut slow = vec![0f32; m * n];
            matmul_reference(&q, &w, &mut slow);
            let PackedWeight::Int4(w4) = &w else {
                unreachable!()
            };
            let mut fast = vec![f32::NAN; m * n];
            // SAFETY: the CPU has the features (checked above); `fast` holds `m * n` floats.
            unsafe {
                super::super::avx2::matmul_tiles_evex256(
                    &q,
                    &w4.tiles,
                    n,
                    0..n.div_ceil(TILE_N),
                    fast.as_mut_ptr(),
                )
            };
            assert_eq!(bits(&fast), bits(&slow), "{m}x{n}x{k}");
        }
    }

    #[test]
    fn rows_do_not_depend_on_batch() {
        let (m, n, k) = if cfg!(miri) {
            (7, 40, 64)
        } else {
            (77, 48, 576)
        };
        let raw = blocks(&random(n * k, 3), Int4Source::Q4_1);
        let w = PackedWeight::Int4(Int4Weight::from_gguf(Int4Source::Q4_1, &raw, n, k));
        let x = random(m * k, 4);
        let mut q = QuantizedRows::default();
        q.quantize(&x, m, k);
        for kernel in Kernel::supported() {
            let mut all = vec![0f32; m * n];
            matmul_with(kernel, &q, &w, &mut all);
            for row in 0..m {
                let mut one = QuantizedRows::default();
                one.quantize(&x[row * k..(row + 1) * k], 1, k);
                let mut out = vec![0f32; n];
                matmul_with(kernel, &one, &w, &mut out);
                assert_eq!(
                    out,
                    all[row * n..(row + 1) * n],
                    "{kernel}: row {row} differs when batched"
                );
            }
        }
    }
}
