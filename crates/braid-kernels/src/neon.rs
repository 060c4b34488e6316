//! The kernels on Arm NEON, for Graviton, Ampere and Apple CPUs: the x86 kernels' loop
//! (weight-stationary, panels of rows, one weight load applied to several activation rows),
//! with the two Arm instructions that multiply int8 vectors into 32-bit sums:
//! - `sdot` (the dotprod extension, every server Arm core since Neoverse N1): 4 output rows ×
//!   4 K values of a tile meet 4 activation bytes picked by lane index, so one 16-byte
//!   activation load serves four groups of K without a broadcast.
//! - `smmla` (i8mm, Neoverse V1/V2 and Apple M2 on): a 2×2 block of 8-long dot products, two
//!   weight rows by two activation rows, twice the multiply-adds of `sdot` per instruction.
//!   The tiles store 4 K values per row, so neighbouring groups are zipped into 8 per row
//!   (cheap, once per weight load), and the 2×2 results are unzipped before the floats. An odd
//!   last row takes the `sdot` path, which gives the same integers.
//!
//! Both instructions multiply signed by signed bytes, so each format's weights are made signed
//! values first and the sums are exact `Σ w · a`, with no correction:
//! - int8 weights are stored +128: `xor 0x80` flips them back.
//! - int4 weights are nibbles 0..15, already valid signed bytes once a mask (`and 0x0F`) or a
//!   shift (`ushr 4`) takes them out of their byte. For `smmla` the packed bytes are zipped
//!   before they are unpacked: one zip then serves the low and the high nibbles.
//! - int5 weights are those nibbles plus 16 where the tile's plane of fifth bits says so: 16
//!   bits spread to 16 bytes (`dup`, `cmtst` against one bit per byte) and or-ed in, zipped
//!   like the nibbles for `smmla`.
//!
//! The float epilogue is the reference's operations in its order (convert, scale product, fused
//! multiply-add per block, and for int4 the fused multiply-add of the minimum by the
//! activations' sum), so every path writes the reference's bits.
//!
//! The loop over panels, tiles and rows is shared; a format only says how one of its blocks
//! meets the rows ([`Block`]).
//!
//! `sdot`, `smmla` and the half-float conversion are written as inline assembly: their Rust
//! intrinsics are not stable yet. The rest is stable NEON intrinsics (NEON is baseline on
//! aarch64).

use super::int4::Unpacked;
use super::{int4, int5, int8, QuantizedRows, BLOCK, TILE_N};
use crate::kernel_ops::{KernelOps, PeakOp};
use crate::panels::{for_each_panel, PanelTile};
use crate::FloatIsa;
use half::f16;
use std::arch::aarch64::*;
use std::arch::asm;

/// Rows of activations processed together per weight load (two `smmla` row pairs).
const MR: usize = 4;
/// Output rows per vector of four 32-bit sums: a tile is four of them.
const QUARTER: usize = TILE_N / 4;

/// How one block of a weight format's tile meets rows of activations: the exact integer dot
/// products (`sdot` or `smmla`), and what the float epilogue takes from the tile.
pub(super) trait Block {
    /// Adds the block's products with `R` rows into `iacc[set][row][v]` (output rows
    /// `4v..4v + 4`). `act[row]` is the row's 32 activation bytes of the block, in two vectors.
    /// `A` independent accumulator sets shorten the chains of dependent adds when there are
    /// few rows; integer sums are exact, so how the work is split between them does not change
    /// the result.
    ///
    /// # Safety
    ///
    /// The CPU must support the dot product extension.
    unsafe fn sdot<const R: usize, const A: usize>(
        &self,
        act: &[[int8x16_t; 2]; R],
        iacc: &mut [[[int32x4_t; 4]; R]; A],
    );

    /// Adds the block's products with `P` pairs of rows into `iacc[pair]`, as `smmla` lays
    /// them out: `iacc[pair][2v]` holds weight rows `4v, 4v + 1` × the pair's two rows,
    /// `iacc[pair][2v + 1]` weight rows `4v + 2, 4v + 3`. `act[pair][q]` is K values
    /// `8q..8q + 8` of the pair's first row, then of its second.
    ///
    /// # Safety
    ///
    /// The CPU must support i8mm.
    unsafe fn mmla<const P: usize>(
        &self,
        act: &[[int8x16_t; 4]; P],
        iacc: &mut [[int32x4_t; 8]; P],
    );

    /// The tile's 16 weight scales as f32, 4 output rows per vector.
    fn scales(&self) -> [float32x4_t; 4];

    /// The tile's 16 weight minimums as f32, for a format that has them.
    fn mins(&self) -> Option<[float32x4_t; 4]>;

    /// The block with one byte per weight, for a format that packs them tighter: a panel of
    /// many rows then unpacks each block once instead of once per [`MR`] rows.
    #[inline(always)]
    fn unpacked(&self) -> Option<Unpacked> {
        None
    }
}

/// The kernel table's row for NEON with dot products.
pub(crate) static DOTPROD_OPS: KernelOps = KernelOps {
    int8: matmul_tiles_dotprod::<int8::Tile>,
    int4: matmul_tiles_dotprod::<int4::Tile>,
    int5: matmul_tiles_dotprod::<int5::Tile>,
    floats: FloatIsa::Portable,
    peak: Some(PeakOp {
        macs: 16,
        run: crate::peak_loops::arm::sdot,
    }),
};

/// The kernel table's row for NEON with the int8 matrix multiply.
pub(crate) static I8MM_OPS: KernelOps = KernelOps {
    int8: matmul_tiles_i8mm::<int8::Tile>,
    int4: matmul_tiles_i8mm::<int4::Tile>,
    int5: matmul_tiles_i8mm::<int5::Tile>,
    floats: FloatIsa::Portable,
    peak: Some(PeakOp {
        macs: 16,
        run: crate::peak_loops::arm::sdot,
    }),
};

/// The dotprod kernel for the tiles `tiles`: writes exactly what the format's
/// `reference_tiles` writes, with the same values.
///
/// # Safety
///
/// The CPU must support NEON and the dot product extension. `out` must be valid for writes of
/// `x.rows() * w.n()` floats, and no one else may read or write the elements this call writes
/// until it returns.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn matmul_tiles_dotprod<T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: the features `sdot` needs are enabled; `out` is the caller's.
    unsafe { matmul_tiles::<false, T>(x, weights, n, tiles, out) }
}

/// The i8mm kernel: as [`matmul_tiles_dotprod`], with `smmla` for pairs of rows.
///
/// # Safety
///
/// As for [`matmul_tiles_dotprod`], and the CPU must support the int8 matrix multiply
/// extension (i8mm).
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(super) unsafe fn matmul_tiles_i8mm<T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: the features `smmla` and `sdot` need are enabled; `out` is the caller's.
    unsafe { matmul_tiles::<true, T>(x, weights, n, tiles, out) }
}

/// # Safety
///
/// Called only from the `#[target_feature]` functions above, which vouch for the CPU features
/// (`MMLA` needs i8mm) and pass their caller's `out`; `weights` holds the tiles of a weight
/// `n` outputs wide with `x.k_blocks` blocks per tile row.
#[inline(always)]
unsafe fn matmul_tiles<const MMLA: bool, T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    let panel = Panels::<MMLA> { x, out, n };
    // SAFETY: the caller vouches for the features (`MMLA` needs i8mm) and passes its
    // caller's `out`.
    unsafe { for_each_panel(&panel, x, weights, tiles) }
}

/// The output and shape [`panel_tile`] needs besides the blocks; `MMLA` pairs rows with `smmla`.
struct Panels<'a, const MMLA: bool> {
    x: &'a QuantizedRows,
    out: *mut f32,
    n: usize,
}

impl<const MMLA: bool, T: Block> PanelTile<T> for Panels<'_, MMLA> {
    #[inline(always)]
    unsafe fn unpacked(block: &T) -> Option<Unpacked> {
        block.unpacked()
    }

    #[inline(always)]
    unsafe fn tile(&self, blocks: &[T], rows: std::ops::Range<usize>, t: usize) {
        // SAFETY: the caller's promise, which is `panel_tile`'s.
        unsafe { panel_tile::<MMLA, T>(self.x, blocks, rows, self.x.k_blocks, self.out, self.n, t) }
    }

    #[inline(always)]
    unsafe fn tile_unpacked(&self, blocks: &[Unpacked], rows: std::ops::Range<usize>, t: usize) {
        // SAFETY: as for `tile`.
        unsafe {
            panel_tile::<MMLA, Unpacked>(self.x, blocks, rows, self.x.k_blocks, self.out, self.n, t)
        }
    }
}

/// The rows `rows` of a panel times weight tile `t` (whose blocks are `tile_row`): writes
/// their columns from `16 · t` below `n`.
///
/// # Safety
///
/// As for [`matmul_tiles`]; `rows.end <= x.rows()`, `tile_row` is tile `t`'s `kbs` blocks.
#[inline(always)]
unsafe fn panel_tile<const MMLA: bool, T: Block>(
    x: &QuantizedRows,
    tile_row: &[T],
    rows: std::ops::Range<usize>,
    kbs: usize,
    out: *mut f32,
    n: usize,
    t: usize,
) {
    let (mut row, end) = (rows.start, rows.end);
    let valid = TILE_N.min(n - t * TILE_N);
    // Rows left over after the MR-row steps (and pairs) take narrower paths that compute each
    // element in the same order, so a row's result does not depend on `m`. Every call below
    // has `row + rows <= end <= m`, `tile_row` = tile `t`'s `kbs` blocks and `valid` stopping
    // at column `n`: what the row functions need, with `out` and the features from our caller.
    if MMLA {
        while row + MR <= end {
            // SAFETY: see above; `MMLA` means the CPU has i8mm.
            unsafe { rows_tile_mmla::<T, { MR / 2 }>(x, tile_row, row, kbs, out, n, t, valid) };
            row += MR;
        }
        while row + 2 <= end {
            // SAFETY: as above.
            unsafe { rows_tile_mmla::<T, 1>(x, tile_row, row, kbs, out, n, t, valid) };
            row += 2;
        }
    } else {
        while row + MR <= end {
            // SAFETY: see above.
            unsafe { rows_tile_sdot::<T, MR, 1>(x, tile_row, row, kbs, out, n, t, valid) };
            row += MR;
        }
    }
    while row < end {
        // SAFETY: see above.
        unsafe { rows_tile_sdot::<T, 1, 2>(x, tile_row, row, kbs, out, n, t, valid) };
        row += 1;
    }
}

/// `sdot acc.4s, w.16b, a.4b[L]`: each 32-bit lane of `acc` (one output row) gains the dot
/// product of its 4 weight bytes with activation bytes `4L..4L + 4`.
///
/// # Safety
///
/// The CPU must support the dot product extension.
#[inline(always)]
unsafe fn sdot_lane<const L: i32>(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    // SAFETY: the caller vouches for dotprod; the instruction touches only its registers.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{l}]",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `smmla acc.4s, w.16b, a.16b`: `acc[2i + j]` gains the dot product of weight row `i` (bytes
/// `8i..8i + 8` of `w`) with activation row `j` (bytes `8j..8j + 8` of `a`).
///
/// # Safety
///
/// The CPU must support i8mm.
#[inline(always)]
unsafe fn smmla(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    // SAFETY: the caller vouches for i8mm; the instruction touches only its registers.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {w:v}.16b, {a:v}.16b",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// 16 half floats as f32, 4 output rows per vector. `fcvtl` converts half floats exactly, as
/// the reference's `to_f32` does.
#[inline(always)]
fn widen_halves(halves: &[f16; TILE_N]) -> [float32x4_t; 4] {
    let (lo, hi): (uint16x8_t, uint16x8_t);
    let (s0, s1, s2, s3): (float32x4_t, float32x4_t, float32x4_t, float32x4_t);
    // SAFETY: `halves` is 16 half floats (32 bytes), read as two vectors of 8; the
    // conversions touch only their registers (NEON is baseline on aarch64).
    unsafe {
        let p = halves.as_ptr() as *const u16;
        lo = vld1q_u16(p);
        hi = vld1q_u16(p.add(8));
        asm!(
            "fcvtl {s0:v}.4s, {lo:v}.4h",
            "fcvtl2 {s1:v}.4s, {lo:v}.8h",
            "fcvtl {s2:v}.4s, {hi:v}.4h",
            "fcvtl2 {s3:v}.4s, {hi:v}.8h",
            lo = in(vreg) lo,
            hi = in(vreg) hi,
            s0 = out(vreg) s0,
            s1 = out(vreg) s1,
            s2 = out(vreg) s2,
            s3 = out(vreg) s3,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    [s0, s1, s2, s3]
}

/// Adds one block's integer sums of one row (`sums[v]`: output rows `4v..4v + 4`) into its
/// float totals exactly as the reference does: `fma(sum as f32, wscale · ascale, total)`, then
/// for a format with minimums `fma(wmin, asum, total)`, where `min` is `(wmin, asum)`.
#[inline(always)]
fn add_block(
    totals: &mut [float32x4_t; 4],
    sums: [int32x4_t; 4],
    wscale: &[float32x4_t; 4],
    ascale: f32,
    min: Option<(&[float32x4_t; 4], f32)>,
) {
    // SAFETY: plain NEON arithmetic on registers (NEON is baseline on aarch64).
    unsafe {
        let ascale = vdupq_n_f32(ascale);
        for v in 0..4 {
            let f = vcvtq_f32_s32(sums[v]);
            let s = vmulq_f32(wscale[v], ascale);
            totals[v] = vfmaq_f32(totals[v], f, s);
            if let Some((wmin, asum)) = min {
                totals[v] = vfmaq_f32(totals[v], wmin[v], vdupq_n_f32(asum));
            }
        }
    }
}

/// Writes a row's 16 totals to `dst`, or only the first `valid` of them.
///
/// # Safety
///
/// `dst` must be valid for writes of `valid` floats, which no one else reads or writes.
#[inline(always)]
unsafe fn store_row(totals: &[float32x4_t; 4], dst: *mut f32, valid: usize) {
    // SAFETY: the caller vouches for `dst..dst + valid`; `tmp` holds 16 floats.
    unsafe {
        if valid == TILE_N {
            for (v, total) in totals.iter().enumerate() {
                vst1q_f32(dst.add(v * QUARTER), *total);
            }
        } else {
            // Only the tile's columns below `n`: a last partial tile must not spill into the
            // next row's first columns, which may be another task's.
            let mut tmp = [0f32; TILE_N];
            for (v, total) in totals.iter().enumerate() {
                vst1q_f32(tmp.as_mut_ptr().add(v * QUARTER), *total);
            }
            std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, valid);
        }
    }
}

/// Rows `row0..row0 + R` times weight tile `t` (whose blocks are `tile_row`), with `sdot`:
/// writes the first `valid` columns, counted from `16 · t`, of those rows. `A` independent
/// accumulator sets shorten the chains of dependent adds when there are few rows.
///
/// # Safety
///
/// The CPU must support the dot product extension; `row0 + R <= x.rows()`,
/// `tile_row.len() == kbs == x.k_blocks`, `16 · t + valid <= n`. `out` must be valid for writes
/// of `x.rows() * n` floats, and no one else may read or write the elements this call writes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_tile_sdot<T: Block, const R: usize, const A: usize>(
    x: &QuantizedRows,
    tile_row: &[T],
    row0: usize,
    kbs: usize,
    out: *mut f32,
    n: usize,
    t: usize,
    valid: usize,
) {
    // SAFETY: (the whole body) the caller vouches for the CPU features; every pointer read is
    // inside the buffer named in its comment, and the stores stay within the caller's columns.
    unsafe {
        let zero_f = vdupq_n_f32(0.0);
        let zero_i = vdupq_n_s32(0);
        let mut facc = [[zero_f; 4]; R];
        let qs = x.qs.as_ptr();
        for (kb, tile) in tile_row.iter().enumerate() {
            let wscale = tile.scales();
            let wmin = tile.mins();
            let mut act = [[vdupq_n_s8(0); 2]; R];
            for (r, act) in act.iter_mut().enumerate() {
                // Row `row0 + r < m`, block `kb < kbs`: its 32 bytes.
                let a = qs.add(((row0 + r) * kbs + kb) * BLOCK);
                *act = [vld1q_s8(a), vld1q_s8(a.add(16))];
            }
            let mut iacc = [[[zero_i; 4]; R]; A];
            tile.sdot::<R, A>(&act, &mut iacc);
            for (r, totals) in facc.iter_mut().enumerate() {
                let mut sums = iacc[0][r];
                for set in &iacc[1..] {
                    for v in 0..4 {
                        sums[v] = vaddq_s32(sums[v], set[r][v]);
                    }
                }
                // Below `m * kbs`, the length of `scales` and `sums`.
                let b = (row0 + r) * kbs + kb;
                let ascale = *x.scales.get_unchecked(b);
                let min = wmin.as_ref().map(|wmin| (wmin, *x.sums.get_unchecked(b)));
                add_block(totals, sums, &wscale, ascale, min);
            }
        }
        for (r, totals) in facc.iter().enumerate() {
            // Row `row0 + r < m`, columns `16t..16t + valid <= n`: the caller's.
            store_row(totals, out.add((row0 + r) * n + t * TILE_N), valid);
        }
    }
}

/// Rows `row0..row0 + 2P` times weight tile `t`, with `smmla` on `P` pairs of rows: as
/// [`rows_tile_sdot`] for `2P` rows.
///
/// # Safety
///
/// The CPU must support i8mm; otherwise as for [`rows_tile_sdot`] with `R = 2P`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_tile_mmla<T: Block, const P: usize>(
    x: &QuantizedRows,
    tile_row: &[T],
    row0: usize,
    kbs: usize,
    out: *mut f32,
    n: usize,
    t: usize,
    valid: usize,
) {
    // SAFETY: (the whole body) the caller vouches for the CPU features; every pointer read is
    // inside the buffer named in its comment, and the stores stay within the caller's columns.
    unsafe {
        let zero_f = vdupq_n_f32(0.0);
        let zero_i = vdupq_n_s32(0);
        // `facc[p][j]`: row `row0 + 2p + j`.
        let mut facc = [[[zero_f; 4]; 2]; P];
        let qs = x.qs.as_ptr();
        for (kb, tile) in tile_row.iter().enumerate() {
            let wscale = tile.scales();
            let wmin = tile.mins();
            // `act[p][q]`: K values `8q..8q + 8` of row `row0 + 2p`, then of the next row.
            let mut act = [[vdupq_n_s8(0); 4]; P];
            for (p, act) in act.iter_mut().enumerate() {
                // Rows `row0 + 2p`, `row0 + 2p + 1` `< m`, block `kb < kbs`: 32 bytes each.
                let a0 = qs.add(((row0 + 2 * p) * kbs + kb) * BLOCK);
                let a1 = qs.add(((row0 + 2 * p + 1) * kbs + kb) * BLOCK);
                for half in 0..2 {
                    let r0 = vreinterpretq_s64_s8(vld1q_s8(a0.add(16 * half)));
                    let r1 = vreinterpretq_s64_s8(vld1q_s8(a1.add(16 * half)));
                    act[2 * half] = vreinterpretq_s8_s64(vzip1q_s64(r0, r1));
                    act[2 * half + 1] = vreinterpretq_s8_s64(vzip2q_s64(r0, r1));
                }
            }
            let mut iacc = [[zero_i; 8]; P];
            tile.mmla::<P>(&act, &mut iacc);
            for (p, totals) in facc.iter_mut().enumerate() {
                // Even lanes are the pair's first row, odd lanes its second.
                let mut sums = [[zero_i; 4]; 2];
                for v in 0..4 {
                    let (a, b) = (iacc[p][2 * v], iacc[p][2 * v + 1]);
                    sums[0][v] = vuzp1q_s32(a, b);
                    sums[1][v] = vuzp2q_s32(a, b);
                }
                for j in 0..2 {
                    // Below `m * kbs`, the length of `scales` and `sums`.
                    let b = (row0 + 2 * p + j) * kbs + kb;
                    let ascale = *x.scales.get_unchecked(b);
                    let min = wmin.as_ref().map(|wmin| (wmin, *x.sums.get_unchecked(b)));
                    add_block(&mut totals[j], sums[j], &wscale, ascale, min);
                }
            }
        }
        for (p, totals) in facc.iter().enumerate() {
            for (j, totals) in totals.iter().enumerate() {
                // Row `row0 + 2p + j < m`, columns `16t..16t + valid <= n`: the caller's.
                let dst = out.add((row0 + 2 * p + j) * n + t * TILE_N);
                store_row(totals, dst, valid);
            }
        }
    }
}

/// Quarter `v` of group `g` of a block stored a byte per weight (`qs`, as the int8 tile lays
/// it out: output rows `4v..4v + 4` × K values `4g..4g + 4`), as signed weights: stored +128
/// (`OFFSET`, the int8 format) or as they are (an unpacked 4- or 5-bit block, below 32).
#[inline(always)]
fn signed_quarter<const OFFSET: bool>(
    qs: &[[u8; 4 * TILE_N]; BLOCK / 4],
    g: usize,
    v: usize,
) -> int8x16_t {
    debug_assert!(g < BLOCK / 4 && v < 4);
    // SAFETY: `qs[g]` is 64 bytes, of which bytes `16v..16v + 16` are read (`v < 4`).
    unsafe {
        let stored = vld1q_u8(qs.get_unchecked(g).as_ptr().add(16 * v));
        if OFFSET {
            vreinterpretq_s8_u8(veorq_u8(stored, vdupq_n_u8(0x80)))
        } else {
            vreinterpretq_s8_u8(stored)
        }
    }
}

/// Groups `4h + L` of one block stored a byte per weight (`L` is the activation lane): every
/// row's sums gain that group's products. Rows use accumulator set `L % A`.
///
/// # Safety
///
/// The CPU must support the dot product extension; `h < 2`.
#[inline(always)]
unsafe fn sdot_group<const OFFSET: bool, const L: i32, const R: usize, const A: usize>(
    iacc: &mut [[[int32x4_t; 4]; R]; A],
    qs: &[[u8; 4 * TILE_N]; BLOCK / 4],
    h: usize,
    act: &[[int8x16_t; 2]; R],
) {
    let g = 4 * h + L as usize;
    let set = &mut iacc[L as usize % A];
    for v in 0..4 {
        let wv = signed_quarter::<OFFSET>(qs, g, v);
        for (sums, act) in set.iter_mut().zip(act) {
            // SAFETY: the caller vouches for dotprod.
            sums[v] = unsafe { sdot_lane::<L>(sums[v], wv, act[h]) };
        }
    }
}

/// [`Block::sdot`] for a block stored a byte per weight (see [`signed_quarter`]).
///
/// # Safety
///
/// The CPU must support the dot product extension.
#[inline(always)]
unsafe fn byte_sdot<const OFFSET: bool, const R: usize, const A: usize>(
    qs: &[[u8; 4 * TILE_N]; BLOCK / 4],
    act: &[[int8x16_t; 2]; R],
    iacc: &mut [[[int32x4_t; 4]; R]; A],
) {
    for h in 0..2 {
        // SAFETY: the caller vouches for dotprod; `h < 2`.
        unsafe {
            sdot_group::<OFFSET, 0, R, A>(iacc, qs, h, act);
            sdot_group::<OFFSET, 1, R, A>(iacc, qs, h, act);
            sdot_group::<OFFSET, 2, R, A>(iacc, qs, h, act);
            sdot_group::<OFFSET, 3, R, A>(iacc, qs, h, act);
        }
    }
}

/// [`Block::mmla`] for a block stored a byte per weight (see [`signed_quarter`]).
///
/// # Safety
///
/// The CPU must support i8mm.
#[inline(always)]
unsafe fn byte_mmla<const OFFSET: bool, const P: usize>(
    qs: &[[u8; 4 * TILE_N]; BLOCK / 4],
    act: &[[int8x16_t; 4]; P],
    iacc: &mut [[int32x4_t; 8]; P],
) {
    for q in 0..BLOCK / 8 {
        for v in 0..4 {
            // Groups 2q and 2q + 1 hold K values 8q..8q + 8, four each per row: the 32-bit
            // zips put each row's eight side by side.
            let lo = vreinterpretq_s32_s8(signed_quarter::<OFFSET>(qs, 2 * q, v));
            let hi = vreinterpretq_s32_s8(signed_quarter::<OFFSET>(qs, 2 * q + 1, v));
            // SAFETY: register shuffles (NEON is baseline); the caller vouches for i8mm.
            unsafe {
                let w01 = vreinterpretq_s8_s32(vzip1q_s32(lo, hi));
                let w23 = vreinterpretq_s8_s32(vzip2q_s32(lo, hi));
                for (sums, act) in iacc.iter_mut().zip(act) {
                    sums[2 * v] = smmla(sums[2 * v], w01, act[q]);
                    sums[2 * v + 1] = smmla(sums[2 * v + 1], w23, act[q]);
                }
            }
        }
    }
}

impl Block for int8::Tile {
    #[inline(always)]
    unsafe fn sdot<const R: usize, const A: usize>(
        &self,
        act: &[[int8x16_t; 2]; R],
        iacc: &mut [[[int32x4_t; 4]; R]; A],
    ) {
        // SAFETY: the caller vouches for dotprod.
        unsafe { byte_sdot::<true, R, A>(&self.qs, act, iacc) }
    }

    #[inline(always)]
    unsafe fn mmla<const P: usize>(
        &self,
        act: &[[int8x16_t; 4]; P],
        iacc: &mut [[int32x4_t; 8]; P],
    ) {
        // SAFETY: the caller vouches for i8mm.
        unsafe { byte_mmla::<true, P>(&self.qs, act, iacc) }
    }

    #[inline(always)]
    fn scales(&self) -> [float32x4_t; 4] {
        widen_halves(&self.scales)
    }

    #[inline(always)]
    fn mins(&self) -> Option<[float32x4_t; 4]> {
        None
    }
}

impl Block for Unpacked {
    #[inline(always)]
    unsafe fn sdot<const R: usize, const A: usize>(
        &self,
        act: &[[int8x16_t; 2]; R],
        iacc: &mut [[[int32x4_t; 4]; R]; A],
    ) {
        // SAFETY: the caller vouches for dotprod.
        unsafe { byte_sdot::<false, R, A>(&self.qs, act, iacc) }
    }

    #[inline(always)]
    unsafe fn mmla<const P: usize>(
        &self,
        act: &[[int8x16_t; 4]; P],
        iacc: &mut [[int32x4_t; 8]; P],
    ) {
        // SAFETY: the caller vouches for i8mm.
        unsafe { byte_mmla::<false, P>(&self.qs, act, iacc) }
    }

    #[inline(always)]
    fn scales(&self) -> [float32x4_t; 4] {
        widen_halves(&self.scales)
    }

    #[inline(always)]
    fn mins(&self) -> Option<[float32x4_t; 4]> {
        Some(widen_halves(&self.mins))
    }
}

/// The 4-bit tile's block (with a 5-bit tile's plane of fifth bits, if `high` holds it) as
/// one byte per weight.
#[inline(always)]
fn unpack_nibbles(tile: &int4::Tile, high: Option<&[u64; BLOCK / 4]>) -> Unpacked {
    let mut out = Unpacked::empty(tile, high.is_some());
    for p in 0..BLOCK / 8 {
        for v in 0..4 {
            for (w, g) in nibble_quarters(tile, high, p, v) {
                // SAFETY: the store is 16 bytes of `out.qs[g]`'s 64 (`v < 4`).
                unsafe { vst1q_u8(out.qs[g].as_mut_ptr().add(16 * v), w) };
            }
        }
    }
    out
}

/// Quarter `v` of packed group `p` of an int4 tile: output rows `4v..4v + 4`, 4 bytes each,
/// with K values `4p..4p + 4` in the low nibbles and `16 + 4p..16 + 4p + 4` in the high ones.
#[inline(always)]
fn packed_quarter(tile: &int4::Tile, p: usize, v: usize) -> uint8x16_t {
    let bytes = &tile.qs[p][16 * v..16 * v + 16];
    // SAFETY: `bytes` is the 16 bytes the load reads.
    unsafe { vld1q_u8(bytes.as_ptr()) }
}

/// 16 fifth bits as bytes: byte `i` is 16 where bit `i` of `bits` is set, else 0.
#[inline(always)]
fn fifth_bits(bits: u16) -> uint8x16_t {
    // SAFETY: register arithmetic (NEON is baseline on aarch64).
    unsafe {
        let spread = vcombine_u8(vdup_n_u8(bits as u8), vdup_n_u8((bits >> 8) as u8));
        let select = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
        vandq_u8(vtstq_u8(spread, select), vdupq_n_u8(16))
    }
}

/// Quarter `v` of group `g` of a 5-bit tile's plane of fifth bits, as bytes of 0 or 16 laid out
/// as [`packed_quarter`]'s (output rows `4v..4v + 4`, 4 K values each).
#[inline(always)]
fn fifth_quarter(high: &[u64; BLOCK / 4], g: usize, v: usize) -> uint8x16_t {
    fifth_bits((high[g] >> (16 * v)) as u16)
}

/// `w` with its fifth bits added when the tile has them.
#[inline(always)]
fn with_fifth(w: uint8x16_t, fifth: Option<uint8x16_t>) -> uint8x16_t {
    // SAFETY: register arithmetic (NEON is baseline on aarch64).
    fifth.map_or(w, |f| unsafe { vorrq_u8(w, f) })
}

/// Quarter `v` of packed group `p` of a 4-bit block as the weights (output rows `4v..4v + 4`)
/// of groups `p` (K `4p..4p + 4`, the low nibbles) and `p + 4` (K `16 + 4p..`, the high ones),
/// each with 16 added where a 5-bit tile's plane of fifth bits `high` says so.
#[inline(always)]
fn nibble_quarters(
    tile: &int4::Tile,
    high: Option<&[u64; BLOCK / 4]>,
    p: usize,
    v: usize,
) -> [(uint8x16_t, usize); 2] {
    let packed = packed_quarter(tile, p, v);
    // SAFETY: register arithmetic (NEON is baseline on aarch64).
    let halves = unsafe {
        [
            (vandq_u8(packed, vdupq_n_u8(0x0F)), p),
            (vshrq_n_u8::<4>(packed), p + 4),
        ]
    };
    halves.map(|(w, g)| (with_fifth(w, high.map(|high| fifth_quarter(high, g, v))), g))
}

/// Packed group `L` of one block of a 4-bit tile, or of a 5-bit one when `high` holds its plane
/// of fifth bits: its low nibbles (K `4L..4L + 4`) meet lane `L` of the activations' first 16
/// bytes, its high nibbles (K `16 + 4L..`) lane `L` of the last 16. Nibble half `h` uses
/// accumulator set `(2L + h) % A`: the two halves of a load feed the same rows, and with two
/// sets they do not wait on each other.
///
/// # Safety
///
/// The CPU must support the dot product extension.
#[inline(always)]
unsafe fn sdot_nibbles<const L: i32, const R: usize, const A: usize>(
    iacc: &mut [[[int32x4_t; 4]; R]; A],
    tile: &int4::Tile,
    high: Option<&[u64; BLOCK / 4]>,
    act: &[[int8x16_t; 2]; R],
) {
    let l = L as usize;
    for v in 0..4 {
        for (h, (w, _)) in nibble_quarters(tile, high, l, v).into_iter().enumerate() {
            // SAFETY: register arithmetic (NEON is baseline); the caller vouches for dotprod.
            unsafe {
                let w = vreinterpretq_s8_u8(w);
                let set = &mut iacc[(2 * l + h) % A];
                for (sums, act) in set.iter_mut().zip(act) {
                    sums[v] = sdot_lane::<L>(sums[v], w, act[h]);
                }
            }
        }
    }
}

/// [`Block::sdot`] for a 4-bit tile, or a 5-bit one when `high` holds its plane of fifth bits.
///
/// # Safety
///
/// The CPU must support the dot product extension.
#[inline(always)]
unsafe fn nibble_sdot<const R: usize, const A: usize>(
    tile: &int4::Tile,
    high: Option<&[u64; BLOCK / 4]>,
    act: &[[int8x16_t; 2]; R],
    iacc: &mut [[[int32x4_t; 4]; R]; A],
) {
    // SAFETY: the caller vouches for dotprod.
    unsafe {
        sdot_nibbles::<0, R, A>(iacc, tile, high, act);
        sdot_nibbles::<1, R, A>(iacc, tile, high, act);
        sdot_nibbles::<2, R, A>(iacc, tile, high, act);
        sdot_nibbles::<3, R, A>(iacc, tile, high, act);
    }
}

/// [`Block::mmla`] for a 4-bit tile, or a 5-bit one when `high` holds its plane of fifth bits.
///
/// # Safety
///
/// The CPU must support i8mm.
#[inline(always)]
unsafe fn nibble_mmla<const P: usize>(
    tile: &int4::Tile,
    high: Option<&[u64; BLOCK / 4]>,
    act: &[[int8x16_t; 4]; P],
    iacc: &mut [[int32x4_t; 8]; P],
) {
    // The 32-bit zip of two quarters, as for int8: each row's 8 bytes side by side.
    let zip = |a: uint8x16_t, b: uint8x16_t| {
        let (a, b) = (vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b));
        // SAFETY: register shuffles (NEON is baseline on aarch64).
        unsafe {
            (
                vreinterpretq_u8_u32(vzip1q_u32(a, b)),
                vreinterpretq_u8_u32(vzip2q_u32(a, b)),
            )
        }
    };
    for p in 0..BLOCK / 16 {
        for v in 0..4 {
            // Packed groups 2p and 2p + 1 zipped: each row's 8 bytes hold K values 8p..8p + 8
            // in their low nibbles (activations `q = p`) and 16 + 8p..16 + 8p + 8 in their high
            // ones (`q = p + 2`). The fifth bits of groups 2p, 2p + 1 (low) and 2p + 4, 2p + 5
            // (high) are zipped the same way.
            let (z01, z23) = zip(
                packed_quarter(tile, 2 * p, v),
                packed_quarter(tile, 2 * p + 1, v),
            );
            let fifth = |g: usize| {
                high.map(|high| zip(fifth_quarter(high, g, v), fifth_quarter(high, g + 1, v)))
            };
            // SAFETY: register arithmetic (NEON is baseline); the caller vouches for i8mm.
            unsafe {
                let nibble = vdupq_n_u8(0x0F);
                let halves = [
                    (
                        p,
                        vandq_u8(z01, nibble),
                        vandq_u8(z23, nibble),
                        fifth(2 * p),
                    ),
                    (
                        p + 2,
                        vshrq_n_u8::<4>(z01),
                        vshrq_n_u8::<4>(z23),
                        fifth(2 * p + 4),
                    ),
                ];
                for (q, w01, w23, fifth) in halves {
                    let w01 = vreinterpretq_s8_u8(with_fifth(w01, fifth.map(|f| f.0)));
                    let w23 = vreinterpretq_s8_u8(with_fifth(w23, fifth.map(|f| f.1)));
                    for (sums, act) in iacc.iter_mut().zip(act) {
                        sums[2 * v] = smmla(sums[2 * v], w01, act[q]);
                        sums[2 * v + 1] = smmla(sums[2 * v + 1], w23, act[q]);
                    }
                }
            }
        }
    }
}

impl Block for int4::Tile {
    #[inline(always)]
    unsafe fn sdot<const R: usize, const A: usize>(
        &self,
        act: &[[int8x16_t; 2]; R],
        iacc: &mut [[[int32x4_t; 4]; R]; A],
    ) {
        // SAFETY: the caller vouches for dotprod.
        unsafe { nibble_sdot::<R, A>(self, None, act, iacc) }
    }

    #[inline(always)]
    unsafe fn mmla<const P: usize>(
        &self,
        act: &[[int8x16_t; 4]; P],
        iacc: &mut [[int32x4_t; 8]; P],
    ) {
        // SAFETY: the caller vouches for i8mm.
        unsafe { nibble_mmla::<P>(self, None, act, iacc) }
    }

    #[inline(always)]
    fn scales(&self) -> [float32x4_t; 4] {
        widen_halves(&self.scales)
    }

    #[inline(always)]
    fn mins(&self) -> Option<[float32x4_t; 4]> {
        Some(widen_halves(&self.mins))
    }

    #[inline(always)]
    fn unpacked(&self) -> Option<Unpacked> {
        Some(unpack_nibbles(self, None))
    }
}

impl Block for int5::Tile {
    #[inline(always)]
    unsafe fn sdot<const R: usize, const A: usize>(
        &self,
        act: &[[int8x16_t; 2]; R],
        iacc: &mut [[[int32x4_t; 4]; R]; A],
    ) {
        // SAFETY: the caller vouches for dotprod.
        unsafe { nibble_sdot::<R, A>(&self.low, Some(&self.high), act, iacc) }
    }

    #[inline(always)]
    unsafe fn mmla<const P: usize>(
        &self,
        act: &[[int8x16_t; 4]; P],
        iacc: &mut [[int32x4_t; 8]; P],
    ) {
        // SAFETY: the caller vouches for i8mm.
        unsafe { nibble_mmla::<P>(&self.low, Some(&self.high), act, iacc) }
    }

    #[inline(always)]
    fn scales(&self) -> [float32x4_t; 4] {
        self.low.scales()
    }

    #[inline(always)]
    fn mins(&self) -> Option<[float32x4_t; 4]> {
        self.low.mins()
    }

    #[inline(always)]
    fn unpacked(&self) -> Option<Unpacked> {
        Some(unpack_nibbles(&self.low, Some(&self.high)))
    }
}
