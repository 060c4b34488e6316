//! The kernels on AVX-512 VNNI: one `vpdpbusd` multiplies a 512-bit vector of weights (16
//! output rows × 4 K values) by 4 activation bytes broadcast to every lane, and adds the 16 sums.
//! - int8 weights are stored +128 (unsigned, as `vpdpbusd` wants them), so each block's sum
//!   carries `128 · Σa`, which the activations' per-block correction removes.
//! - int4 weights are unsigned nibbles: one 512-bit load is masked and shifted into two weight
//!   vectors (K values 0..15 and 16..31 of the block), each meeting its own activation bytes.
//! - int5 weights are int4's nibbles plus 16 where their fifth bit is set: the tile's bit plane
//!   is a byte mask per weight vector, for one masked add.
//! - A full panel of prompt rows meets int4 and int5 blocks unpacked once to a byte per weight
//!   (`Unpacked`): laid out as int8's, unsigned, so it needs no correction.
//!
//! The loop over panels, tiles and rows is shared; a format only says how one of its blocks
//! meets the rows ([`Block`]).

use super::int4::Unpacked;
use super::{int4, int5, int8, QuantizedRows, BLOCK, TILE_N};
use crate::kernel_ops::{KernelOps, PeakOp};
use crate::panels::{for_each_panel, PanelTile};
use crate::FloatIsa;
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

    /// The block with one byte per weight, for a format that packs them tighter: a panel of
    /// many rows then unpacks each block once instead of once per [`MR`] rows.
    ///
    /// # Safety
    ///
    /// The CPU features of [`matmul_tiles`].
    #[inline(always)]
    unsafe fn unpacked(&self) -> Option<Unpacked> {
        None
    }
}

/// The kernel table's row for AVX-512 VNNI.
pub(crate) static OPS: KernelOps = KernelOps {
    int8: matmul_tiles::<int8::Tile>,
    int4: matmul_tiles::<int4::Tile>,
    int5: matmul_tiles::<int5::Tile>,
    floats: FloatIsa::Avx512,
    peak: Some(PeakOp {
        macs: 64,
        run: crate::peak_loops::x86::dpbusd512,
    }),
};

/// Rows of activations processed together per weight load.
const MR: usize = 4;

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
    let panel = Panels { x, out, n };
    // SAFETY: the features are enabled; the rest is our caller's promise.
    unsafe { for_each_panel(&panel, x, weights, tiles) }
}

/// [`matmul_tiles`] for the rows `rows` only, reading the packed blocks: the rows of a step
/// that the AMX kernel's 16-row tiles leave over.
///
/// # Safety
///
/// As for [`matmul_tiles`], with `rows.end <= x.rows()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
pub(super) unsafe fn matmul_rows<T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
    out: *mut f32,
) {
    let panel = Panels { x, out, n };
    let kbs = x.k_blocks;
    for t in tiles {
        // SAFETY: our caller's promise; `weights` holds tile `t`'s `kbs` blocks.
        unsafe { panel.tile(&weights[t * kbs..(t + 1) * kbs], rows.clone(), t) };
    }
}

/// The output and shape [`panel_tile`] needs besides the blocks.
struct Panels<'a> {
    x: &'a QuantizedRows,
    out: *mut f32,
    n: usize,
}

impl<T: Block> PanelTile<T> for Panels<'_> {
    #[inline(always)]
    unsafe fn unpacked(block: &T) -> Option<Unpacked> {
        // SAFETY: the caller vouches for the features.
        unsafe { block.unpacked() }
    }

    #[inline(always)]
    unsafe fn tile(&self, blocks: &[T], rows: std::ops::Range<usize>, t: usize) {
        // SAFETY: the caller's promise, which is `panel_tile`'s.
        unsafe { panel_tile(self.x, blocks, rows, self.x.k_blocks, self.out, self.n, t) }
    }

    #[inline(always)]
    unsafe fn tile_unpacked(&self, blocks: &[Unpacked], rows: std::ops::Range<usize>, t: usize) {
        // SAFETY: as for `tile`.
        unsafe { panel_tile(self.x, blocks, rows, self.x.k_blocks, self.out, self.n, t) }
    }
}

/// The rows `rows` of a panel times weight tile `t` (whose blocks are `tile_row`): writes
/// their columns from `16 · t` below `n`.
///
/// # Safety
///
/// As for [`rows_tile`], for every row of `rows` (`rows.end <= x.rows()`).
#[inline(always)]
unsafe fn panel_tile<T: Block>(
    x: &QuantizedRows,
    tile_row: &[T],
    rows: std::ops::Range<usize>,
    kbs: usize,
    out: *mut f32,
    n: usize,
    t: usize,
) {
    let valid = TILE_N.min(n - t * TILE_N);
    let mask: __mmask16 = if valid == TILE_N {
        0xFFFF
    } else {
        (1u16 << valid) - 1
    };
    let mut row = rows.start;
    // `row + MR <= rows.end <= m`, `tile_row` is tile `t`'s `kbs` blocks, and `mask` stops at
    // column `n`: what `rows_tile` needs, with `out` from our caller.
    while row + MR <= rows.end {
        rows_tile::<T, MR, 2>(x, tile_row, row, kbs, out, n, t, mask);
        row += MR;
    }
    while row < rows.end {
        rows_tile::<T, 1, 4>(x, tile_row, row, kbs, out, n, t, mask);
        row += 1;
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
    // sums finish: a build tuned for Zen 4 unrolled this loop itself, and the generic x86-64
    // tuning does not (`braid bench-engine --batch 1` shows the difference).
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

/// The integer dot products of a block stored a byte per weight (`qs[g]`: 16 rows × K values
/// `4g..4g + 4`) with rows `row0..row0 + R`, in `A` sets of accumulators.
///
/// # Safety
///
/// The CPU features of [`matmul_tiles`]; `row0 + R <= x.rows()`, `kb < kbs == x.k_blocks`.
#[inline(always)]
unsafe fn byte_dots<const R: usize, const A: usize>(
    qs: &[[u8; 4 * TILE_N]; BLOCK / 4],
    x: &QuantizedRows,
    row0: usize,
    kbs: usize,
    kb: usize,
) -> [[__m512i; R]; A] {
    let act = x.qs.as_ptr();
    let mut iacc = [[_mm512_setzero_si512(); R]; A];
    for g in (0..BLOCK / 4).step_by(A) {
        for (j, accs) in iacc.iter_mut().enumerate() {
            let wv = _mm512_load_si512(qs[g + j].as_ptr() as *const __m512i);
            for (r, acc) in accs.iter_mut().enumerate() {
                // In bounds: row `row0 + r < m`, block `kb < kbs`, bytes `4(g + j)..+4` of
                // its 32.
                let a = act.add(((row0 + r) * kbs + kb) * BLOCK + (g + j) * 4) as *const i32;
                *acc = _mm512_dpbusd_epi32(*acc, wv, _mm512_set1_epi32(a.read_unaligned()));
            }
        }
    }
    iacc
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
        let wscale = _mm512_cvtph_ps(_mm256_loadu_si256(self.scales.as_ptr() as *const __m256i));
        let iacc = byte_dots::<R, A>(&self.qs, x, row0, kbs, kb);
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
        nibble_block::<R, A>(self, None, x, row0, kbs, kb, facc)
    }

    #[inline(always)]
    unsafe fn unpacked(&self) -> Option<Unpacked> {
        Some(unpack_nibbles(self, None))
    }
}

impl Block for int5::Tile {
    #[inline(always)]
    unsafe fn block<const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [__m512; R],
    ) {
        nibble_block::<R, A>(&self.low, Some(&self.high), x, row0, kbs, kb, facc)
    }

    #[inline(always)]
    unsafe fn unpacked(&self) -> Option<Unpacked> {
        Some(unpack_nibbles(&self.low, Some(&self.high)))
    }
}

impl Block for Unpacked {
    #[inline(always)]
    unsafe fn block<const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [__m512; R],
    ) {
        let iacc = byte_dots::<R, A>(&self.qs, x, row0, kbs, kb);
        finish_nibbles(&self.scales, &self.mins, &iacc, x, row0, kbs, kb, facc);
    }
}

/// The 4-bit tile's block (with a 5-bit tile's plane of fifth bits, if `high` holds it) as
/// one byte per weight.
///
/// # Safety
///
/// The CPU features of [`matmul_tiles`].
#[inline(always)]
unsafe fn unpack_nibbles(tile: &int4::Tile, high: Option<&[u64; BLOCK / 4]>) -> Unpacked {
    let mut out = Unpacked::empty(tile, high.is_some());
    for p in 0..BLOCK / 8 {
        for (wv, g) in nibble_groups(tile, high, p) {
            _mm512_store_si512(out.qs[g].as_mut_ptr() as *mut __m512i, wv);
        }
    }
    out
}

/// Packed group `p` of a 4-bit block as the weight vectors of groups `p` (K `4p..4p + 4`, the
/// low nibbles) and `p + 4` (K `16 + 4p..`, the high ones), each with 16 added where a 5-bit
/// tile's plane of fifth bits `high` says so (its mask for the group, one masked add).
///
/// # Safety
///
/// The CPU features of [`matmul_tiles`]; `p < 4`.
#[inline(always)]
unsafe fn nibble_groups(
    tile: &int4::Tile,
    high: Option<&[u64; BLOCK / 4]>,
    p: usize,
) -> [(__m512i, usize); 2] {
    let nibble = _mm512_set1_epi8(15);
    let packed = _mm512_load_si512(tile.qs[p].as_ptr() as *const __m512i);
    let mut groups = [
        (_mm512_and_si512(packed, nibble), p),
        (
            _mm512_and_si512(_mm512_srli_epi16(packed, 4), nibble),
            p + 4,
        ),
    ];
    // No closures here: a closure would not inherit the kernel's features.
    if let Some(high) = high {
        for (wv, g) in &mut groups {
            *wv = _mm512_mask_add_epi8(*wv, high[*g], *wv, _mm512_set1_epi8(16));
        }
    }
    groups
}

/// A block of a 4-bit tile, or of a 5-bit one when `high` holds its plane of fifth bits:
/// as [`Block::block`] (whose requirements it has).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn nibble_block<const R: usize, const A: usize>(
    tile: &int4::Tile,
    high: Option<&[u64; BLOCK / 4]>,
    x: &QuantizedRows,
    row0: usize,
    kbs: usize,
    kb: usize,
    facc: &mut [__m512; R],
) {
    let qs = x.qs.as_ptr();
    let mut iacc = [[_mm512_setzero_si512(); R]; A];
    for p in 0..BLOCK / 8 {
        for (h, (wv, g)) in nibble_groups(tile, high, p).into_iter().enumerate() {
            let accs = &mut iacc[(2 * p + h) % A];
            for (r, acc) in accs.iter_mut().enumerate() {
                // In bounds: row `row0 + r < m`, block `kb < kbs`, bytes `4g..4g + 4` of its 32.
                let a = qs.add(((row0 + r) * kbs + kb) * BLOCK + g * 4) as *const i32;
                *acc = _mm512_dpbusd_epi32(*acc, wv, _mm512_set1_epi32(a.read_unaligned()));
            }
        }
    }
    finish_nibbles(&tile.scales, &tile.mins, &iacc, x, row0, kbs, kb, facc);
}

/// Adds a block of a format with minimums to the rows' float sums: `total += f(Σ) · d_w · d_x`,
/// then `total += m_w · s_x`, as the reference orders them.
///
/// # Safety
///
/// The CPU features of [`matmul_tiles`]; `row0 + R <= x.rows()`, `kb < kbs == x.k_blocks`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn finish_nibbles<const R: usize, const A: usize>(
    scales: &[half::f16; TILE_N],
    mins: &[half::f16; TILE_N],
    iacc: &[[__m512i; R]; A],
    x: &QuantizedRows,
    row0: usize,
    kbs: usize,
    kb: usize,
    facc: &mut [__m512; R],
) {
    let wscale = _mm512_cvtph_ps(_mm256_loadu_si256(scales.as_ptr() as *const __m256i));
    let wmin = _mm512_cvtph_ps(_mm256_loadu_si256(mins.as_ptr() as *const __m256i));
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
