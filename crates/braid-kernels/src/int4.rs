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
//!
//! The 5-bit format ([`super::int5`]) is this tile plus a plane of fifth bits, so the matrix
//! ([`NibbleWeight`]), its packing from file blocks, its row dequantization and the portable
//! reference are written here once, generic over the tile ([`NibbleTile`]). `Unpacked` is
//! either tile with a byte per weight: what a panel of prompt rows meets, so that a block is
//! unpacked once per panel rather than once per few rows.

use super::{QuantizedRows, BLOCK, TILE_N};
use half::f16;

/// One block of 32 K values for 16 output rows, two weights per byte (see the module docs).
#[derive(Clone)]
#[repr(C, align(64))]
pub struct Tile {
    pub(super) qs: [[u8; 4 * TILE_N]; BLOCK / 8],
    pub(super) scales: [f16; TILE_N],
    pub(super) mins: [f16; TILE_N],
}

/// A block of the 4- or 5-bit format with its integers unpacked to one byte each, laid out as
/// the int8 tile's (`qs[g]`: 16 rows × K values `4g..4g + 4`), unsigned and without offset.
/// A kernel meeting a panel of many rows unpacks each block into one of these once, instead of
/// once per few rows; only the kernels write and read it.
#[derive(Clone)]
#[repr(C, align(64))]
pub(super) struct Unpacked {
    pub(super) qs: [[u8; 4 * TILE_N]; BLOCK / 4],
    pub(super) scales: [f16; TILE_N],
    pub(super) mins: [f16; TILE_N],
    /// Whether the integers may reach 31 (a 5-bit block) rather than 15.
    pub(super) five_bits: bool,
}

impl Unpacked {
    /// `tile`'s scales and minimums, with every integer still 0.
    pub(super) fn empty(tile: &Tile, five_bits: bool) -> Self {
        Unpacked {
            qs: [[0; 4 * TILE_N]; BLOCK / 4],
            scales: tile.scales,
            mins: tile.mins,
            five_bits,
        }
    }
}

/// A weight matrix of `n` outputs × `k` inputs whose tiles are `T`: the 4-bit format
/// ([`Int4Weight`]) or the 5-bit one built on it ([`super::Int5Weight`]).
pub struct NibbleWeight<T> {
    pub(super) n: usize,
    pub(super) k: usize,
    /// `[n_tiles][k_blocks]`
    pub(super) tiles: Vec<T>,
}

/// A weight matrix in the 4-bit format.
pub type Int4Weight = NibbleWeight<Tile>;

/// One sub-block of 32 weights as a file block holds it: its scale, its minimum and its
/// unsigned integers in K order (weight `scale · q + min`).
pub type SubBlock = (f16, f16, [u8; BLOCK]);

/// A family of GGUF block layouts whose weights are `d · q + m` with small unsigned `q`.
pub trait NibbleSource: Copy + std::fmt::Debug {
    /// Weights per block of the file.
    fn block_weights(self) -> usize;
    fn block_bytes(self) -> usize;
    /// The file block `block`'s sub-blocks of 32, in order.
    fn sub_blocks(self, block: &[u8]) -> Vec<SubBlock>;
}

/// A tile of unsigned integers with a scale and a minimum per row and block: what the packing,
/// the row dequantization and the portable reference need of it.
pub trait NibbleTile: Clone {
    type Source: NibbleSource;
    /// A tile of zero weights.
    const EMPTY: Self;
    /// The 4-bit part: the low nibbles, the scales and the minimums.
    fn low(&self) -> &Tile;
    /// Stores row `r`'s sub-block, into a tile where that row is still empty.
    fn set(&mut self, r: usize, sub: &SubBlock);
    /// The integer weight of row `r` at position `e` of the block.
    fn weight(&self, r: usize, e: usize) -> u8;
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

/// A half float from two little-endian bytes of `block` at `i`.
pub(super) fn half_at(block: &[u8], i: usize) -> f16 {
    f16::from_le_bytes([block[i], block[i + 1]])
}

/// The scale and minimum of sub-block `j` of a K-quant super-block (Q4_K, Q5_K), from its `d`
/// and `dmin` (the first four bytes) and its 12 bytes of 6-bit scales and minimums (ggml's
/// `get_scale_min_k4`), as half floats.
pub(super) fn k_quant_scale_min(block: &[u8], j: usize) -> (f16, f16) {
    let (d, dmin) = (half_at(block, 0).to_f32(), half_at(block, 2).to_f32());
    let scales = &block[4..16];
    let (sc, mn) = if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    };
    (
        f16::from_f32(d * sc as f32),
        f16::from_f32(-(dmin * mn as f32)),
    )
}

impl NibbleSource for Int4Source {
    fn block_weights(self) -> usize {
        match self {
            Int4Source::Q4_0 | Int4Source::Q4_1 => 32,
            Int4Source::Q4K => 256,
        }
    }

    fn block_bytes(self) -> usize {
        match self {
            Int4Source::Q4_0 => 18,
            Int4Source::Q4_1 => 20,
            Int4Source::Q4K => 144,
        }
    }

    fn sub_blocks(self, block: &[u8]) -> Vec<SubBlock> {
        // 16 bytes holding elements 0..16 in the low nibbles and 16..32 in the high ones.
        let split = |bytes: &[u8]| std::array::from_fn(|e| (bytes[e % 16] >> (4 * (e / 16))) & 15);
        match self {
            Int4Source::Q4_0 => {
                let d = half_at(block, 0);
                vec![(d, f16::from_f32(-8.0 * d.to_f32()), split(&block[2..18]))]
            }
            Int4Source::Q4_1 => vec![(half_at(block, 0), half_at(block, 2), split(&block[4..20]))],
            Int4Source::Q4K => (0..8)
                .map(|j| {
                    let (scale, min) = k_quant_scale_min(block, j);
                    // Sub-blocks 2i and 2i + 1 share 32 bytes: low and high nibbles.
                    let bytes = &block[16 + 32 * (j / 2)..][..32];
                    let nibbles = std::array::from_fn(|e| (bytes[e] >> (4 * (j % 2))) & 15);
                    (scale, min, nibbles)
                })
                .collect(),
        }
    }
}

impl NibbleTile for Tile {
    type Source = Int4Source;
    const EMPTY: Self = Tile {
        qs: [[0u8; 4 * TILE_N]; BLOCK / 8],
        scales: [f16::ZERO; TILE_N],
        mins: [f16::ZERO; TILE_N],
    };

    fn low(&self) -> &Tile {
        self
    }

    fn set(&mut self, r: usize, &(scale, min, q): &SubBlock) {
        self.scales[r] = scale;
        self.mins[r] = min;
        for (e, q) in q.into_iter().enumerate() {
            // Element e = 4g + j: groups 0..3 in the low nibbles, 4..7 in the high ones.
            let (g, j) = (e / 4, e % 4);
            self.qs[g % 4][r * 4 + j] |= (q & 15) << (4 * (g / 4));
        }
    }

    #[inline(always)]
    fn weight(&self, r: usize, e: usize) -> u8 {
        let (g, j) = (e / 4, e % 4);
        (self.qs[g % 4][r * 4 + j] >> (4 * (g / 4))) & 15
    }
}

impl<T: NibbleTile> NibbleWeight<T> {
    /// Packs a row-major `n × k` tensor stored as GGUF `source` blocks (`raw`, rows of
    /// `k / source.block_weights()` blocks). Panics if `raw` does not hold exactly that many.
    pub fn from_gguf(source: T::Source, raw: &[u8], n: usize, k: usize) -> Self {
        let per = source.block_weights();
        assert!(k.is_multiple_of(per), "k = {k} is not a multiple of {per}");
        let (k_blocks, bytes) = (k / BLOCK, source.block_bytes());
        assert_eq!(
            raw.len(),
            n * (k / per) * bytes,
            "{source:?} data is not {n}x{k}"
        );
        let mut tiles = vec![T::EMPTY; n.div_ceil(TILE_N) * k_blocks];
        for (row, raw_row) in raw.chunks_exact((k / per) * bytes).enumerate() {
            let (t, r) = (row / TILE_N, row % TILE_N);
            let subs = raw_row
                .chunks_exact(bytes)
                .flat_map(|b| source.sub_blocks(b));
            for (kb, sub) in subs.enumerate() {
                tiles[t * k_blocks + kb].set(r, &sub);
            }
        }
        Self { n, k, tiles }
    }

    /// Bytes the kernel streams per full pass over the weights.
    pub fn size_in_bytes(&self) -> usize {
        self.tiles.len() * std::mem::size_of::<T>()
    }

    /// The dequantized weights of one output row (used for embedding lookups).
    #[inline(always)]
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        let k_blocks = self.k / BLOCK;
        let (t, r) = (row / TILE_N, row % TILE_N);
        for kb in 0..k_blocks {
            let tile = &self.tiles[t * k_blocks + kb];
            let low = tile.low();
            let (d, m) = (low.scales[r].to_f32(), low.mins[r].to_f32());
            for e in 0..BLOCK {
                out[kb * BLOCK + e] = tile.weight(r, e) as f32 * d + m;
            }
        }
    }
}

/// The portable reference of every format of unsigned integers with a scale and a minimum:
/// every kernel's arithmetic, one element at a time. Writes what
/// [`crate::format_tile::FormatTile::reference_tiles`] documents.
///
/// # Safety
///
/// As for `reference_tiles`.
pub(super) unsafe fn nibble_reference_tiles<T: NibbleTile>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    let (m, kbs) = (x.m, x.k_blocks);
    // Each output is its blocks' sums in K order, as in every kernel; the loops run weight
    // block by weight block so that a block's integers are unpacked once for all rows.
    let mut acc = vec![0f32; m];
    for t in tiles {
        for r in 0..TILE_N.min(n - t * TILE_N) {
            acc.fill(0.0);
            for kb in 0..kbs {
                let tile = &weights[t * kbs + kb];
                let q: [i32; BLOCK] = std::array::from_fn(|e| tile.weight(r, e) as i32);
                let low = tile.low();
                let (d, min) = (low.scales[r].to_f32(), low.mins[r].to_f32());
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

impl crate::format_tile::FormatTile for Tile {
    unsafe fn reference_tiles(
        x: &QuantizedRows,
        weights: &[Tile],
        n: usize,
        tiles: std::ops::Range<usize>,
        out: *mut f32,
    ) {
        // SAFETY: the caller's guarantees are the ones the shared reference needs.
        unsafe { nibble_reference_tiles(x, weights, n, tiles, out) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format_checks::{
        assert_amx_code_matches_reference, assert_avx_vnni_code_matches_reference,
        assert_every_kernel_matches_reference, assert_rows_do_not_depend_on_batch, quantized,
        random,
    };
    use crate::{matmul_reference, PackedWeight};

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
    #[cfg(not(any(miri, braid_emulated)))]
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
    #[cfg(not(any(miri, braid_emulated)))]
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
    #[cfg(not(any(miri, braid_emulated)))]
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

    #[cfg(not(any(miri, braid_emulated)))]
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

    /// Random Q4_K super-blocks: every byte of the packed 6-bit scales and minimums and of the
    /// nibbles random, the super-block's scale and minimum small half floats. Any such bytes
    /// are a valid block, so the kernels are checked against the reference on every scale and
    /// nibble pattern, without ggml's quantizer.
    fn random_q4k(n: usize, k: usize, seed: u64) -> Vec<u8> {
        let halves = random(2 * n * k / 256, seed);
        let bytes = random(140 * n * k / 256, seed + 1);
        let mut raw = Vec::with_capacity(144 * n * k / 256);
        for (pair, rest) in halves.chunks(2).zip(bytes.chunks(140)) {
            for h in pair {
                raw.extend(f16::from_f32(0.01 * h.abs() + 1e-3).to_le_bytes());
            }
            raw.extend(rest.iter().map(|b| ((b + 1.0) * 127.99) as u8));
        }
        raw
    }

    #[test]
    fn q4k_on_every_kernel_is_bit_identical_to_the_reference() {
        let shapes: &[(usize, usize)] = if cfg!(miri) {
            &[(1, 8), (3, 16)]
        } else {
            &[(1, 40), (9, 48), (70, 16)]
        };
        for &(m, n) in shapes {
            let k = 512;
            let raw = random_q4k(n, k, 7);
            let w = PackedWeight::Int4(Int4Weight::from_gguf(Int4Source::Q4K, &raw, n, k));
            let q = quantized(&random(m * k, 8), m, k);
            assert_every_kernel_matches_reference(&q, &w, &format!("Q4_K x{k}"));
        }
    }

    fn inputs(m: usize, n: usize, k: usize, source: Int4Source) -> (PackedWeight, QuantizedRows) {
        let raw = blocks(&random(n * k, 1), source);
        let w = PackedWeight::Int4(Int4Weight::from_gguf(source, &raw, n, k));
        (w, quantized(&random(m * k, 2), m, k))
    }

    #[cfg(not(any(miri, braid_emulated)))]
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
                assert_every_kernel_matches_reference(&q, &w, &format!("{source:?} x{k}"));
            }
        }
    }

    /// The AMX kernel's code on the tile model (and its instructions where the CPU has them,
    /// in `every_kernel_…`), with full 16-row tiles, a partial one and both block parities.
    #[test]
    fn amx_kernel_code_is_bit_identical_on_the_tile_model() {
        for &(m, n, k) in SHAPES.iter().chain(&[(70, 40, 96), (32, 24, 64)]) {
            let (w, q) = inputs(m, n, k, Int4Source::Q4_1);
            assert_amx_code_matches_reference(&q, &w, "Q4_1");
        }
    }

    /// The AVX-VNNI code path with the EVEX instruction, as in the int8 tests.
    #[test]
    fn avx_vnni_kernel_code_is_bit_identical_with_the_evex_instruction() {
        for &(m, n, k) in SHAPES {
            let (w, q) = inputs(m, n, k, Int4Source::Q4_1);
            assert_avx_vnni_code_matches_reference(&q, &w, "Q4_1");
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
        assert_rows_do_not_depend_on_batch(&random(m * k, 4), m, k, &w);
    }
}
