//! The 4-bit weight format: Q4_0 and Q4_1 tensors keep their 4 bits and their own scales.
//!
//! Why: a decode step reads every weight once, so a lone sequence is bound by the bytes the
//! weights take. Requantized to int8 the default model's layers stream 119 MB per token; kept at
//! 4 bits they stream 66 MB. Keeping the file's own values also removes a second rounding: the
//! weights the kernel multiplies are exactly the ones in the GGUF (`d · q + m`).
//!
//! Format: blocks of 32 along K, as in the file, packed in tiles of 16 output rows like the int8
//! format. Byte `qs[p][4r + j]` holds the weight of row `r` at `k = 4p + j` in its low nibble and
//! at `k = 16 + 4p + j` in its high one, so one vector load yields two vectors of 16 rows × 4 K
//! values after a mask and a shift, each ready for the same `vpdpbusd`/`sdot` as the int8
//! format. The nibbles are unsigned (0..15); each row's block has a scale `d` and a minimum `m`
//! (Q4_0's `d · (q - 8)` is `m = -8d`, exact in half precision), so a block contributes
//! `d_w · d_x · Σ q_w q_x + m_w · (d_x · Σ q_x)`: an exact integer sum, then two fused
//! multiply-adds whose order every kernel keeps, so every path writes the same bits.

use super::{Kernel, QuantizedRows, BLOCK, TILE_N};
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

/// The GGUF block layouts this format takes as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int4Source {
    /// 18 bytes: `d` (f16), 16 bytes of nibbles; weight `d · (q - 8)`.
    Q4_0,
    /// 20 bytes: `d` (f16), `m` (f16), 16 bytes of nibbles; weight `d · q + m`.
    Q4_1,
}

impl Int4Source {
    pub fn block_bytes(self) -> usize {
        match self {
            Int4Source::Q4_0 => 18,
            Int4Source::Q4_1 => 20,
        }
    }
}

impl Int4Weight {
    /// Packs a row-major `n × k` tensor stored as GGUF `source` blocks (`raw`, `k / 32` blocks
    /// per row; in each block byte `i` holds element `i` in its low nibble and `i + 16` in its
    /// high one). Panics if `raw` does not hold exactly that many blocks.
    pub fn from_gguf(source: Int4Source, raw: &[u8], n: usize, k: usize) -> Self {
        assert!(
            k.is_multiple_of(BLOCK),
            "k = {k} is not a multiple of {BLOCK}"
        );
        let k_blocks = k / BLOCK;
        let bytes = source.block_bytes();
        assert_eq!(
            raw.len(),
            n * k_blocks * bytes,
            "{source:?} data is not {n}x{k}"
        );
        let empty = Tile {
            qs: [[0u8; 4 * TILE_N]; BLOCK / 8],
            scales: [f16::ZERO; TILE_N],
            mins: [f16::ZERO; TILE_N],
        };
        let mut tiles = vec![empty; n.div_ceil(TILE_N) * k_blocks];
        for row in 0..n {
            let (t, r) = (row / TILE_N, row % TILE_N);
            for kb in 0..k_blocks {
                let block = &raw[(row * k_blocks + kb) * bytes..][..bytes];
                let half = |i: usize| f16::from_le_bytes([block[i], block[i + 1]]);
                let d = half(0);
                let (m, nibbles) = match source {
                    Int4Source::Q4_0 => (f16::from_f32(-8.0 * d.to_f32()), &block[2..]),
                    Int4Source::Q4_1 => (half(2), &block[4..]),
                };
                let tile = &mut tiles[t * k_blocks + kb];
                tile.scales[r] = d;
                tile.mins[r] = m;
                for (e, q) in (0..BLOCK).map(|e| (e, (nibbles[e % 16] >> (4 * (e / 16))) & 15)) {
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

/// The tiles `tiles` of the product, with `kernel`: writes what [`reference_tiles`] writes.
///
/// # Safety
///
/// The CPU must have `kernel`'s features, and `out` must be as [`reference_tiles`] requires.
pub(super) unsafe fn tiles_with(
    kernel: Kernel,
    x: &QuantizedRows,
    w: &Int4Weight,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: (every arm) the caller vouches for the CPU features and for `out`.
    unsafe {
        match kernel {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Vnni => super::avx512::matmul_tiles(x, &w.tiles, w.n, tiles, out),
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni => super::avx2::matmul_tiles_avxvnni(x, &w.tiles, w.n, tiles, out),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => super::avx2::matmul_tiles_avx2(x, &w.tiles, w.n, tiles, out),
            #[cfg(target_arch = "aarch64")]
            Kernel::NeonI8mm => super::neon::matmul_tiles_i8mm(x, w, tiles, out),
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => super::neon::matmul_tiles_dotprod(x, w, tiles, out),
            _ => reference_tiles(x, w, tiles, out),
        }
    }
}

/// Writes `out[row * n + col]` for every row and every column `col` of the tiles `tiles` (the
/// 16 columns from `16 · tile`, fewer in a last partial tile), and nothing else.
///
/// # Safety
///
/// `out` must be valid for writes of `x.rows() * w.n` floats, and no one else may read or
/// write the elements this call writes until it returns.
pub(super) unsafe fn reference_tiles(
    x: &QuantizedRows,
    w: &Int4Weight,
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
                    let b = row * kbs + kb;
                    let a = &x.qs[b * BLOCK..(b + 1) * BLOCK];
                    let mut dot = 0i32;
                    for (e, &av) in a.iter().enumerate() {
                        dot += Int4Weight::nibble(tile, r, e) as i32 * av as i32;
                    }
                    let scale = tile.scales[r].to_f32() * x.scales[b];
                    acc = (dot as f32).mul_add(scale, acc);
                    acc = tile.mins[r].to_f32().mul_add(x.sums[b], acc);
                }
                // SAFETY: `row < m` and `t * TILE_N + r < n`, so the element is inside the
                // `m * n` the caller vouches for, and it is in one of this call's tiles.
                unsafe { out.add(row * n + t * TILE_N + r).write(acc) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{matmul_reference, matmul_with, PackedWeight};
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
            let mut row = vec![0f32; k];
            for r in 0..n {
                w.dequantize_row(r, &mut row);
                for i in 0..k {
                    // ggml computes `d · q + m` (or `d · (q - 8)`) in f32 as well; only the
                    // order of the two roundings may differ.
                    let want = exact[r * k + i];
                    assert!(
                        (row[i] - want).abs() <= 1e-6 * want.abs().max(1.0),
                        "{source:?} [{r}][{i}]: {} vs {want}",
                        row[i]
                    );
                }
            }
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
