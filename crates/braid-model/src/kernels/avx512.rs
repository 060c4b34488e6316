//! The kernels on AVX-512 VNNI: one `vpdpbusd` multiplies a 512-bit vector of weights (16
//! output rows × 4 K values) by 4 activation bytes broadcast to every lane, and adds the 16 sums.
//! - int8 weights are stored +128 (unsigned, as `vpdpbusd` wants them), so each block's sum
//!   carries `128 · Σa`, which the activations' per-block correction removes.
//! - int4 weights are unsigned nibbles: one 512-bit load is masked and shifted into two weight
//!   vectors (K values 0..15 and 16..31 of the block), each meeting its own activation bytes.
//!
//! The loop over panels, tiles and rows is shared; a format only says how one of its blocks
//! meets the rows ([`Block`]).

use super::{int4, int8, QuantizedRows, BLOCK, TILE_N};
use std::arch::x86_64::*;

/// How one block of a weight format's tile meets rows `row0..row0 + R`, adding to their 16
/// float sums `facc`. `A` independent integer accumulators per row shorten the chains of
/// dependent `vpdpbusd`s when there are few rows; integer sums are exact, so how the work is
/// split between them does not change the result.
pub(super) trait Block {
    /// # Safety
    ///
    /// The CPU features of [`matmul_tiles`]; `row0 + R <= x.rows()`, `kb < kbs == x.k_blocks`.
    unsafe fn block<const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [__m512; R],
    );
}

/// Rows of activations processed together per weight load.
const MR: usize = 4;
/// Rows per panel (a multiple of MR).
const MB: usize = 64;

/// The VNNI kernel for the tiles `tiles` of a weight `n` outputs wide whose tiles are
/// `weights` (`[n_tiles][k_blocks]`): writes exactly what the format's `reference_tiles`
/// writes, with the same values.
///
/// # Safety
///
/// The CPU must support AVX-512F, AVX-512BW, AVX-512 VNNI and F16C. `out` must be valid for
/// writes of `x.rows() * w.n()` floats, and no one else may read or write the elements this
/// call writes until it returns.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
pub(super) unsafe fn matmul_tiles<T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    let (m, kbs) = (x.m, x.k_blocks);
    // Rows in panels small enough for their activations to stay in L2 while the panel
    // meets every weight tile of this task; the remainder rows take the 1-row path,
    // which computes each element in the same order (results do not depend on `m`).
    for panel in (0..m).step_by(MB) {
        let end = (panel + MB).min(m);
        for t in tiles.clone() {
            let tile_row = &weights[t * kbs..(t + 1) * kbs];
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
                rows_tile::<T, MR, 2>(x, tile_row, row, kbs, out, n, t, mask);
                row += MR;
            }
            while row < end {
                rows_tile::<T, 1, 4>(x, tile_row, row, kbs, out, n, t, mask);
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
unsafe fn rows_tile<T: Block, const R: usize, const A: usize>(
    x: &QuantizedRows,
    tile_row: &[T],
    row0: usize,
    kbs: usize,
    out: *mut f32,
    n: usize,
    t: usize,
    mask: __mmask16,
) {
    let mut facc = [_mm512_setzero_ps(); R];
    // Two blocks per iteration, in order: the loads of the second start while the first's
    // sums finish. A build tuned for Zen 4 unrolled this loop itself and decoded one sequence
    // ~15% faster than the generic x86-64 tuning did without it. (A function, not a closure:
    // a closure would not inherit this function's target features.)
    let mut pairs = tile_row.chunks_exact(2);
    for (p, pair) in pairs.by_ref().enumerate() {
        pair[0].block::<R, A>(x, row0, kbs, 2 * p, &mut facc);
        pair[1].block::<R, A>(x, row0, kbs, 2 * p + 1, &mut facc);
    }
    if let [last] = pairs.remainder() {
        last.block::<R, A>(x, row0, kbs, kbs - 1, &mut facc);
    }
    for (r, total) in facc.iter().enumerate() {
        // The masked store touches only the lanes of `mask`: a last partial tile does not
        // spill into the next row's first columns, which may be another task's.
        let dst = out.add((row0 + r) * n + t * TILE_N);
        _mm512_mask_storeu_ps(dst, mask, *total);
    }
}

impl Block for int8::Tile {
    #[inline(always)]
    unsafe fn block<const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [__m512; R],
    ) {
        let qs = x.qs.as_ptr();
        let wscale = _mm512_cvtph_ps(_mm256_loadu_si256(self.scales.as_ptr() as *const __m256i));
        let mut iacc = [[_mm512_setzero_si512(); R]; A];
        for g in (0..BLOCK / 4).step_by(A) {
            for (j, accs) in iacc.iter_mut().enumerate() {
                let wv = _mm512_load_si512(self.qs[g + j].as_ptr() as *const __m512i);
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
}

impl Block for int4::Tile {
    #[inline(always)]
    unsafe fn block<const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [__m512; R],
    ) {
        let qs = x.qs.as_ptr();
        let wscale = _mm512_cvtph_ps(_mm256_loadu_si256(self.scales.as_ptr() as *const __m256i));
        let wmin = _mm512_cvtph_ps(_mm256_loadu_si256(self.mins.as_ptr() as *const __m256i));
        let nibble = _mm512_set1_epi8(15);
        let mut iacc = [[_mm512_setzero_si512(); R]; A];
        for p in 0..BLOCK / 8 {
            let packed = _mm512_load_si512(self.qs[p].as_ptr() as *const __m512i);
            // Groups p (K 4p..4p+3) and p + 4 (K 16+4p..): low and high nibbles.
            let halves = [
                (_mm512_and_si512(packed, nibble), p),
                (
                    _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble),
                    p + 4,
                ),
            ];
            for (h, (wv, g)) in halves.into_iter().enumerate() {
                let accs = &mut iacc[(2 * p + h) % A];
                for (r, acc) in accs.iter_mut().enumerate() {
                    // In bounds: row `row0 + r < m`, block `kb < kbs`, bytes `4g..4g + 4` of
                    // its 32.
                    let a = qs.add(((row0 + r) * kbs + kb) * BLOCK + g * 4) as *const i32;
                    *acc = _mm512_dpbusd_epi32(*acc, wv, _mm512_set1_epi32(a.read_unaligned()));
                }
            }
        }
        for (r, total) in facc.iter_mut().enumerate() {
            // Below `m * kbs`, the length of `scales` and `sums`.
            let b = (row0 + r) * kbs + kb;
            let mut acc = iacc[0][r];
            for accs in &iacc[1..] {
                acc = _mm512_add_epi32(acc, accs[r]);
            }
            let f = _mm512_cvtepi32_ps(acc);
            let s = _mm512_mul_ps(wscale, _mm512_set1_ps(*x.scales.get_unchecked(b)));
            *total = _mm512_fmadd_ps(f, s, *total);
            *total = _mm512_fmadd_ps(wmin, _mm512_set1_ps(*x.sums.get_unchecked(b)), *total);
        }
    }
}
