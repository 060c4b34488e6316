//! The kernels on 256-bit vectors, for x86 CPUs without AVX-512: AVX2 everywhere, and the
//! VEX-encoded `vpdpbusd` where the CPU has AVX-VNNI (Intel client chips since Alder Lake).
//!
//! The loop is the AVX-512 kernel's, on half the width: a weight vector holds 8 output rows ×
//! 4 K values, is loaded once per block and applied to every activation row of the panel. What
//! differs between the two instruction sets is only how 4 activation bytes meet a weight
//! vector ([`Dot`]):
//! - AVX-VNNI: one `vpdpbusd` on the stored weights (+128, unsigned); the block's sum carries
//!   `128 · Σa`, which the activations' correction removes, as on AVX-512.
//! - AVX2: `vpmaddubsw` multiplies unsigned by signed bytes and adds pairs into saturating
//!   16-bit lanes; with the +128 weights a pair could reach 64,770 and saturate. So the weights
//!   are made signed again (`xor 0x80`) and the sign moves onto the activations: |w| · (±a),
//!   whose pairs stay within 2 · 127 · 127 = 32,258. `vpmaddwd` by ones then widens the pairs
//!   into 32-bit sums of four. Those are exact sums of `w · a`, with no offset to correct.
//!
//! Both give the integer the portable reference computes, so the floats after it are the same.
//! int4 weights are unsigned nibbles (0..15), which meet the activations directly in both: a
//! `vpmaddubsw` pair stays within 2 · 15 · 127, and `vpdpbusd` needs no offset to remove.
//! int5 weights are those nibbles plus 16 where the tile's plane of fifth bits says so, spread
//! from bits to bytes with a shuffle and a compare; their pairs reach 2 · 31 · 127, so AVX2
//! widens a 5-bit block's 16-bit sums at its half.
//!
//! The loop over panels, tiles and rows is shared; a format only says how one of its blocks
//! meets the rows ([`Block`]).

use super::int4::Unpacked;
use super::{int4, int5, int8, QuantizedRows, BLOCK, TILE_N};
use crate::kernel_ops::{KernelOps, PeakOp};
use crate::panels::{for_each_panel, PanelTile};
use crate::FloatIsa;
use std::arch::x86_64::*;

/// Rows of activations processed together per weight load.
const MR: usize = 4;
/// Output rows per 256-bit vector: a tile is two of them.
const HALF: usize = TILE_N / 2;

/// How a weight vector (8 output rows × 4 K values, stored +128) meets 4 activation bytes
/// broadcast to every lane, adding each row's 4 products into its 32-bit lane.
pub(super) trait Dot {
    /// Whether the sums carry the weights' +128 offset, which the block's correction removes.
    const OFFSET: bool;
    /// What is kept of a weight vector while every row of the panel is applied to it.
    type Weights: Copy;
    /// # Safety
    /// The CPU must have the features of the kernel that instantiates this `Dot`.
    unsafe fn prepare(stored: __m256i) -> Self::Weights;
    /// # Safety
    /// As for [`Dot::prepare`].
    unsafe fn dot(acc: __m256i, w: Self::Weights, a: __m256i) -> __m256i;
    /// Whether [`Dot::dot_nibbles`] keeps its sums in 16-bit lanes, which hold a block of
    /// 4-bit weights but only half a block of 5-bit ones.
    const NARROW_NIBBLE_SUMS: bool;
    /// The same for weights that are unsigned bytes below 32 (int4 and int5), with no offset,
    /// into an accumulator of one block (at most 8 groups of 4 below 16, or 4 groups below 32)
    /// that [`Dot::widen_nibbles`] turns into the 32-bit sums.
    ///
    /// # Safety
    /// As for [`Dot::prepare`].
    unsafe fn dot_nibbles(acc: __m256i, w: __m256i, a: __m256i) -> __m256i;
    /// # Safety
    /// As for [`Dot::prepare`].
    unsafe fn widen_nibbles(acc: __m256i) -> __m256i;
}

/// AVX2: `vpsignb`, `vpmaddubsw`, `vpmaddwd`, `vpaddd`.
struct SignedPairs;

impl Dot for SignedPairs {
    const OFFSET: bool = false;
    const NARROW_NIBBLE_SUMS: bool = true;
    /// (|w|, w) as signed bytes.
    type Weights = (__m256i, __m256i);

    #[inline(always)]
    unsafe fn prepare(stored: __m256i) -> Self::Weights {
        let signed = _mm256_xor_si256(stored, _mm256_set1_epi8(-128));
        (_mm256_abs_epi8(signed), signed)
    }

    #[inline(always)]
    unsafe fn dot(acc: __m256i, (magnitude, signed): Self::Weights, a: __m256i) -> __m256i {
        // Weights and activations lie in [-127, 127], so no pair saturates (see the module docs).
        let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(a, signed));
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    /// Pairs stay 16-bit until the block ends: a 4-bit pair is at most 2 · 15 · 127 = 3,810,
    /// so the 8 groups of a block add to at most 30,480, inside a 16-bit lane (a 5-bit pair
    /// reaches 7,874, so 4 groups). One `vpmaddwd` per block instead of one per group: three
    /// instructions per group become two.
    #[inline(always)]
    unsafe fn dot_nibbles(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, a))
    }

    #[inline(always)]
    unsafe fn widen_nibbles(acc: __m256i) -> __m256i {
        _mm256_madd_epi16(acc, _mm256_set1_epi16(1))
    }
}

/// AVX-VNNI: the VEX-encoded `vpdpbusd`.
struct VexDpbusd;

impl Dot for VexDpbusd {
    const OFFSET: bool = true;
    const NARROW_NIBBLE_SUMS: bool = false;
    type Weights = __m256i;

    #[inline(always)]
    unsafe fn prepare(stored: __m256i) -> __m256i {
        stored
    }

    #[inline(always)]
    unsafe fn dot(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, w, a)
    }

    #[inline(always)]
    unsafe fn dot_nibbles(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, w, a)
    }

    #[inline(always)]
    unsafe fn widen_nibbles(acc: __m256i) -> __m256i {
        acc
    }
}

/// The EVEX-encoded 256-bit `vpdpbusd` of AVX-512 VL + VNNI: the same operation as
/// [`VexDpbusd`] in another encoding. It lets a CPU with AVX-512 VNNI but without AVX-VNNI
/// (AMD Zen 4 and Zen 5, Intel Xeons) test every line of the AVX-VNNI kernel but the
/// instruction itself.
#[cfg(test)]
struct EvexDpbusd;

#[cfg(test)]
impl Dot for EvexDpbusd {
    const OFFSET: bool = true;
    const NARROW_NIBBLE_SUMS: bool = false;
    type Weights = __m256i;

    #[inline(always)]
    unsafe fn prepare(stored: __m256i) -> __m256i {
        stored
    }

    #[inline(always)]
    unsafe fn dot(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, w, a)
    }

    #[inline(always)]
    unsafe fn dot_nibbles(acc: __m256i, w: __m256i, a: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, w, a)
    }

    #[inline(always)]
    unsafe fn widen_nibbles(acc: __m256i) -> __m256i {
        acc
    }
}

/// The kernel table's row for AVX2.
pub(crate) static AVX2_OPS: KernelOps = KernelOps {
    int8: matmul_tiles_avx2::<int8::Tile>,
    int4: matmul_tiles_avx2::<int4::Tile>,
    int5: matmul_tiles_avx2::<int5::Tile>,
    floats: FloatIsa::Avx2,
    peak: Some(PeakOp {
        macs: 32,
        run: crate::peak_loops::x86::maddubs256,
    }),
};

/// The kernel table's row for AVX-VNNI.
pub(crate) static AVXVNNI_OPS: KernelOps = KernelOps {
    int8: matmul_tiles_avxvnni::<int8::Tile>,
    int4: matmul_tiles_avxvnni::<int4::Tile>,
    int5: matmul_tiles_avxvnni::<int5::Tile>,
    floats: FloatIsa::Avx2,
    peak: Some(PeakOp {
        macs: 32,
        run: crate::peak_loops::x86::dpbusd256,
    }),
};

/// The AVX2 kernel for the tiles `tiles`: writes exactly what
/// [`super::int8::reference_tiles`] writes, with the same values.
///
/// # Safety
///
/// The CPU must support AVX2, FMA and F16C. `out` must be valid for writes of
/// `x.rows() * w.n()` floats, and no one else may read or write the elements this call writes
/// until it returns.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matmul_tiles_avx2<T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: the features `SignedPairs` needs are enabled; `out` is the caller's.
    unsafe { matmul_tiles::<SignedPairs, T>(x, weights, n, tiles, out) }
}

/// The AVX-VNNI kernel: as [`matmul_tiles_avx2`], on a CPU that also has AVX-VNNI.
///
/// # Safety
///
/// As for [`matmul_tiles_avx2`], and the CPU must support AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn matmul_tiles_avxvnni<T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: the features `VexDpbusd` needs are enabled; `out` is the caller's.
    unsafe { matmul_tiles::<VexDpbusd, T>(x, weights, n, tiles, out) }
}

/// The AVX-VNNI kernel with the EVEX instruction ([`EvexDpbusd`]), for the tests.
///
/// # Safety
///
/// As for [`matmul_tiles_avx2`], and the CPU must support AVX-512 VL and VNNI.
#[cfg(test)]
#[target_feature(enable = "avx2,fma,f16c,avx512vl,avx512vnni")]
pub(super) unsafe fn matmul_tiles_evex256<T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    // SAFETY: the features `EvexDpbusd` needs are enabled; `out` is the caller's.
    unsafe { matmul_tiles::<EvexDpbusd, T>(x, weights, n, tiles, out) }
}

/// # Safety
///
/// Called only from the `#[target_feature]` functions above, which vouch for `D`'s features
/// and pass their caller's `out`.
#[inline(always)]
unsafe fn matmul_tiles<D: Dot, T: Block>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    let panel = Panels::<D> {
        x,
        out,
        n,
        dot: std::marker::PhantomData,
    };
    // SAFETY: the caller vouches for `D`'s features and passes its caller's `out`.
    unsafe { for_each_panel(&panel, x, weights, tiles) }
}

/// The output and shape [`panel_tile`] needs besides the blocks, for the dot product `D`.
struct Panels<'a, D: Dot> {
    x: &'a QuantizedRows,
    out: *mut f32,
    n: usize,
    dot: std::marker::PhantomData<D>,
}

impl<D: Dot, T: Block> PanelTile<T> for Panels<'_, D> {
    #[inline(always)]
    unsafe fn unpacked(block: &T) -> Option<Unpacked> {
        // SAFETY: the caller vouches for the features.
        unsafe { block.unpacked() }
    }

    #[inline(always)]
    unsafe fn tile(&self, blocks: &[T], rows: std::ops::Range<usize>, t: usize) {
        // SAFETY: the caller's promise, which is `panel_tile`'s.
        unsafe { panel_tile::<D, T>(self.x, blocks, rows, self.x.k_blocks, self.out, self.n, t) }
    }

    #[inline(always)]
    unsafe fn tile_unpacked(&self, blocks: &[Unpacked], rows: std::ops::Range<usize>, t: usize) {
        // SAFETY: as for `tile`.
        unsafe {
            panel_tile::<D, Unpacked>(self.x, blocks, rows, self.x.k_blocks, self.out, self.n, t)
        }
    }
}

/// The rows `rows` of a panel times weight tile `t` (whose blocks are `tile_row`): writes
/// their columns from `16 · t` below `n`.
///
/// # Safety
///
/// As for [`rows_tile`], for every row of `rows` (`rows.end <= x.rows()`).
#[inline(always)]
unsafe fn panel_tile<D: Dot, T: Block>(
    x: &QuantizedRows,
    tile_row: &[T],
    rows: std::ops::Range<usize>,
    kbs: usize,
    out: *mut f32,
    n: usize,
    t: usize,
) {
    let valid = TILE_N.min(n - t * TILE_N);
    let mut row = rows.start;
    // `row + R <= rows.end <= m`, `tile_row` is tile `t`'s `kbs` blocks and `valid` stops at
    // column `n`: what `rows_tile` needs, with `out` from our caller.
    while row + MR <= rows.end {
        // SAFETY: see above.
        unsafe { rows_tile::<D, T, MR, 1>(x, tile_row, row, kbs, out, n, t, valid) };
        row += MR;
    }
    while row < rows.end {
        // SAFETY: see above.
        unsafe { rows_tile::<D, T, 1, 4>(x, tile_row, row, kbs, out, n, t, valid) };
        row += 1;
    }
}

/// Rows `row0..row0 + R` times weight tile `t` (whose blocks are `tile_row`): writes the first
/// `valid` columns, counted from `16 · t`, of those rows. `A` independent accumulators per
/// row and half shorten the chains of dependent adds when there are few rows.
///
/// # Safety
///
/// `D`'s CPU features; `row0 + R <= x.rows()`, `tile_row.len() == kbs == x.k_blocks`,
/// `16 · t + valid <= n`. `out` must be valid for writes of `x.rows() * n` floats, and no one
/// else may read or write the elements this call writes.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_tile<D: Dot, T: Block, const R: usize, const A: usize>(
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
        let mut facc = [[_mm256_setzero_ps(); 2]; R];
        // Two blocks per iteration, in order, as on AVX-512 (see `int8_avx512::rows_tile`).
        let mut pairs = tile_row.chunks_exact(2);
        for (p, pair) in pairs.by_ref().enumerate() {
            pair[0].block::<D, R, A>(x, row0, kbs, 2 * p, &mut facc);
            pair[1].block::<D, R, A>(x, row0, kbs, 2 * p + 1, &mut facc);
        }
        if let [last] = pairs.remainder() {
            last.block::<D, R, A>(x, row0, kbs, kbs - 1, &mut facc);
        }
        for (r, total) in facc.iter().enumerate() {
            let dst = out.add((row0 + r) * n + t * TILE_N);
            if valid == TILE_N {
                _mm256_storeu_ps(dst, total[0]);
                _mm256_storeu_ps(dst.add(HALF), total[1]);
            } else {
                // Only the tile's columns below `n`: a last partial tile must not spill into
                // the next row's first columns, which may be another task's.
                let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                for (h, total) in total.iter().enumerate() {
                    let below = _mm256_set1_epi32(valid as i32 - (h * HALF) as i32);
                    let mask = _mm256_cmpgt_epi32(below, lanes);
                    _mm256_maskstore_ps(dst.add(h * HALF), mask, *total);
                }
            }
        }
    }
}

/// How one block of a weight format's tile meets rows `row0..row0 + R` through `D`, adding to
/// their float sums `facc` (two halves of 8 outputs). `A` independent integer accumulators per
/// row and half shorten the chains of dependent adds when there are few rows.
pub(super) trait Block: Sized {
    /// # Safety
    ///
    /// `D`'s CPU features; `row0 + R <= x.rows()`, `kb < kbs == x.k_blocks`, and `self` is an
    /// element of a slice of tiles (the prefetch may point past it, never dereferenced).
    unsafe fn block<D: Dot, const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [[__m256; 2]; R],
    );

    /// The block with one byte per weight, for a format that packs them tighter: a panel of
    /// many rows then unpacks each block once instead of once per [`MR`] rows.
    ///
    /// # Safety
    ///
    /// AVX2.
    #[inline(always)]
    unsafe fn unpacked(&self) -> Option<Unpacked> {
        None
    }
}

/// The halves' float sums of rows `row0..` after block `kb`: `total += f(iacc) · d_w · d_x`
/// (and `+ m_w · s_x` for a format with minimums), as the reference orders them.
///
/// # Safety
///
/// AVX2 and FMA; `(row0 + R) * kbs <= ` the length of `x.scales`, `x.sums` and
/// `x.corrections`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn finish_block<const R: usize, const A: usize>(
    x: &QuantizedRows,
    row0: usize,
    kbs: usize,
    kb: usize,
    iacc: &[[[__m256i; 2]; R]; A],
    correct: bool,
    wscale: [__m256; 2],
    wmin: Option<[__m256; 2]>,
    facc: &mut [[__m256; 2]; R],
) {
    // SAFETY: (the whole body) the caller vouches for the features and the bounds.
    unsafe {
        for (r, total) in facc.iter_mut().enumerate() {
            let b = (row0 + r) * kbs + kb;
            let corr = if correct {
                _mm256_set1_epi32(*x.corrections.get_unchecked(b))
            } else {
                _mm256_setzero_si256()
            };
            let ascale = _mm256_set1_ps(*x.scales.get_unchecked(b));
            for (h, total) in total.iter_mut().enumerate() {
                let mut acc = iacc[0][r][h];
                for accs in &iacc[1..] {
                    acc = _mm256_add_epi32(acc, accs[r][h]);
                }
                let f = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc, corr));
                let s = _mm256_mul_ps(wscale[h], ascale);
                *total = _mm256_fmadd_ps(f, s, *total);
                if let Some(wmin) = wmin {
                    let sum = _mm256_set1_ps(*x.sums.get_unchecked(b));
                    *total = _mm256_fmadd_ps(wmin[h], sum, *total);
                }
            }
        }
    }
}

/// 16 half floats as two vectors of 8 floats.
///
/// # Safety
///
/// F16C.
#[inline(always)]
unsafe fn widen_halves(v: &[half::f16; TILE_N]) -> [__m256; 2] {
    let p = v.as_ptr() as *const __m128i;
    // SAFETY: `v` is 32 bytes, two unaligned 16-byte loads; the caller vouches for F16C.
    unsafe {
        [
            _mm256_cvtph_ps(_mm_loadu_si128(p)),
            _mm256_cvtph_ps(_mm_loadu_si128(p.add(1))),
        ]
    }
}

impl Block for int8::Tile {
    #[inline(always)]
    unsafe fn block<D: Dot, const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [[__m256; 2]; R],
    ) {
        // SAFETY: (the whole body) as the trait requires.
        unsafe {
            prefetch_ahead(self);
            let qs = x.qs.as_ptr();
            let mut iacc = [[[_mm256_setzero_si256(); 2]; R]; A];
            for g in (0..BLOCK / 4).step_by(A) {
                for (j, accs) in iacc.iter_mut().enumerate() {
                    // The tile is 64-byte aligned and `qs[g + j]` is its (g + j)-th 64 bytes.
                    let wp = self.qs[g + j].as_ptr() as *const __m256i;
                    let wv = [
                        D::prepare(_mm256_load_si256(wp)),
                        D::prepare(_mm256_load_si256(wp.add(1))),
                    ];
                    for (r, acc) in accs.iter_mut().enumerate() {
                        // Row `row0 + r < m`, block `kb < kbs`, bytes `4(g + j)..+4` of its 32.
                        let a = qs.add(((row0 + r) * kbs + kb) * BLOCK + (g + j) * 4);
                        let a = _mm256_set1_epi32((a as *const i32).read_unaligned());
                        acc[0] = D::dot(acc[0], wv[0], a);
                        acc[1] = D::dot(acc[1], wv[1], a);
                    }
                }
            }
            let wscale = widen_halves(&self.scales);
            finish_block(x, row0, kbs, kb, &iacc, D::OFFSET, wscale, None, facc);
        }
    }
}

impl Block for int4::Tile {
    #[inline(always)]
    unsafe fn block<D: Dot, const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [[__m256; 2]; R],
    ) {
        // SAFETY: as the trait requires.
        unsafe {
            prefetch_ahead(self);
            nibble_block::<D, R, A>(self, None, x, row0, kbs, kb, facc)
        }
    }

    #[inline(always)]
    unsafe fn unpacked(&self) -> Option<Unpacked> {
        // SAFETY: the caller vouches for AVX2.
        Some(unsafe { unpack_nibbles(self, None) })
    }
}

impl Block for int5::Tile {
    #[inline(always)]
    unsafe fn block<D: Dot, const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [[__m256; 2]; R],
    ) {
        // SAFETY: as the trait requires.
        unsafe {
            prefetch_ahead(self);
            nibble_block::<D, R, A>(&self.low, Some(&self.high), x, row0, kbs, kb, facc)
        }
    }

    #[inline(always)]
    unsafe fn unpacked(&self) -> Option<Unpacked> {
        // SAFETY: the caller vouches for AVX2.
        Some(unsafe { unpack_nibbles(&self.low, Some(&self.high)) })
    }
}

impl Block for Unpacked {
    #[inline(always)]
    unsafe fn block<D: Dot, const R: usize, const A: usize>(
        &self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [[__m256; 2]; R],
    ) {
        // SAFETY: (the whole body) as the trait requires.
        unsafe {
            let mut sums = NibbleSums::<R, A>::new::<D>(self.five_bits);
            for g in 0..BLOCK / 4 {
                // The block is 64-byte aligned and `qs[g]` is its g-th 64 bytes.
                let wp = self.qs[g].as_ptr() as *const __m256i;
                let wv = [_mm256_load_si256(wp), _mm256_load_si256(wp.add(1))];
                sums.add::<D>(x, row0, kbs, kb, g, g % A, wv);
                if g == BLOCK / 8 - 1 {
                    sums.half_done();
                }
            }
            sums.finish::<D>(&self.scales, &self.mins, x, row0, kbs, kb, facc);
        }
    }
}

/// 32 fifth bits as bytes: byte `i` is 16 where bit `i` of `bits` is set, else 0.
///
/// # Safety
///
/// AVX2.
#[inline(always)]
unsafe fn fifth_bits(bits: u32) -> __m256i {
    // SAFETY: register arithmetic; the caller vouches for AVX2.
    unsafe {
        // Bytes 0..8 of the result take byte 0 of `bits`, bytes 8..16 byte 1, and so on (the
        // shuffle works within each 128-bit half, and both halves hold all four bytes).
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                3, 3, 3, 3,
            ),
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
        _mm256_and_si256(set, _mm256_set1_epi8(16))
    }
}

/// Packed group `p` of a 4-bit block as the weight vectors (rows 0..8 and 8..16) of groups
/// `p` (K `4p..4p + 4`, the low nibbles) and `p + 4` (K `16 + 4p..`, the high ones), each with
/// 16 added where a 5-bit tile's plane of fifth bits `high` says so.
///
/// # Safety
///
/// AVX2; `p < 4`.
#[inline(always)]
unsafe fn nibble_groups(
    tile: &int4::Tile,
    high: Option<&[u64; BLOCK / 4]>,
    p: usize,
) -> [([__m256i; 2], usize); 2] {
    // SAFETY: the tile is 64-byte aligned and `qs[p]` is its p-th 64 bytes; the caller vouches
    // for AVX2. (No closures here: a closure would not inherit the kernel's features.)
    unsafe {
        let nibble = _mm256_set1_epi8(15);
        let wp = tile.qs[p].as_ptr() as *const __m256i;
        let packed = [_mm256_load_si256(wp), _mm256_load_si256(wp.add(1))];
        let mut groups = [
            (
                [
                    _mm256_and_si256(packed[0], nibble),
                    _mm256_and_si256(packed[1], nibble),
                ],
                p,
            ),
            (
                [
                    _mm256_and_si256(_mm256_srli_epi16(packed[0], 4), nibble),
                    _mm256_and_si256(_mm256_srli_epi16(packed[1], 4), nibble),
                ],
                p + 4,
            ),
        ];
        if let Some(high) = high {
            for (wv, g) in &mut groups {
                // Rows 0..8 of the group are the plane's low 32 bits, rows 8..16 its high.
                wv[0] = _mm256_or_si256(wv[0], fifth_bits(high[*g] as u32));
                wv[1] = _mm256_or_si256(wv[1], fifth_bits((high[*g] >> 32) as u32));
            }
        }
        groups
    }
}

/// The 4-bit tile's block (with a 5-bit tile's plane of fifth bits, if `high` holds it) as
/// one byte per weight.
///
/// # Safety
///
/// AVX2.
#[inline(always)]
unsafe fn unpack_nibbles(tile: &int4::Tile, high: Option<&[u64; BLOCK / 4]>) -> Unpacked {
    let mut out = Unpacked::empty(tile, high.is_some());
    for p in 0..BLOCK / 8 {
        // SAFETY: `p < 4`, each store is 32 bytes of the 64-byte aligned `out.qs[g]`; the
        // caller vouches for AVX2.
        unsafe {
            for (wv, g) in nibble_groups(tile, high, p) {
                let dst = out.qs[g].as_mut_ptr() as *mut __m256i;
                _mm256_store_si256(dst, wv[0]);
                _mm256_store_si256(dst.add(1), wv[1]);
            }
        }
    }
    out
}

/// A block of the 4-bit tile, or of a 5-bit one when `high` holds its plane of fifth bits:
/// as [`Block::block`] (whose requirements it has).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn nibble_block<D: Dot, const R: usize, const A: usize>(
    tile: &int4::Tile,
    high: Option<&[u64; BLOCK / 4]>,
    x: &QuantizedRows,
    row0: usize,
    kbs: usize,
    kb: usize,
    facc: &mut [[__m256; 2]; R],
) {
    // SAFETY: (the whole body) as the trait requires.
    unsafe {
        let mut sums = NibbleSums::<R, A>::new::<D>(high.is_some());
        for p in 0..BLOCK / 8 {
            for (h, (wv, g)) in nibble_groups(tile, high, p).into_iter().enumerate() {
                sums.add::<D>(x, row0, kbs, kb, g, (2 * p + h) % A, wv);
            }
            // Groups 0, 4, 1 and 5 are in.
            if p == BLOCK / 16 - 1 {
                sums.half_done();
            }
        }
        sums.finish::<D>(&tile.scales, &tile.mins, x, row0, kbs, kb, facc);
    }
}

/// The integer sums of one block of unsigned weights below 32 with `R` rows, in `A` sets.
/// Where `D` keeps them in 16-bit lanes, a 5-bit pair reaches 2 · 31 · 127 = 7,874 and four
/// groups fill a lane, so a 5-bit block's first half is set aside (`half_done`) and widened
/// separately.
struct NibbleSums<const R: usize, const A: usize> {
    iacc: [[[__m256i; 2]; R]; A],
    /// Whether the block's halves are widened separately: 5-bit weights in 16-bit lanes.
    split: bool,
    first_half: Option<[[[__m256i; 2]; R]; A]>,
}

impl<const R: usize, const A: usize> NibbleSums<R, A> {
    /// Empty sums for a block whose integers reach 31 (`five_bits`) or 15.
    ///
    /// # Safety
    ///
    /// `D`'s CPU features (here and in every method).
    #[inline(always)]
    unsafe fn new<D: Dot>(five_bits: bool) -> Self {
        // SAFETY: the caller vouches for AVX2.
        let zero = unsafe { _mm256_setzero_si256() };
        Self {
            iacc: [[[zero; 2]; R]; A],
            split: five_bits && D::NARROW_NIBBLE_SUMS,
            first_half: None,
        }
    }

    /// Adds group `g`'s products (weights `wv`, rows 0..8 and 8..16) into accumulator set
    /// `set`.
    ///
    /// # Safety
    ///
    /// `row0 + R <= x.rows()`, `kb < kbs == x.k_blocks`, `g < 8`, `set < A`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn add<D: Dot>(
        &mut self,
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        g: usize,
        set: usize,
        wv: [__m256i; 2],
    ) {
        // SAFETY: row `row0 + r < m`, block `kb < kbs`, bytes `4g..4g + 4` of its 32.
        unsafe {
            let qs = x.qs.as_ptr();
            for (r, acc) in self.iacc[set].iter_mut().enumerate() {
                let a = qs.add(((row0 + r) * kbs + kb) * BLOCK + g * 4);
                let a = _mm256_set1_epi32((a as *const i32).read_unaligned());
                acc[0] = D::dot_nibbles(acc[0], wv[0], a);
                acc[1] = D::dot_nibbles(acc[1], wv[1], a);
            }
        }
    }

    /// Four groups are in: a split block's sums start again from zero.
    #[inline(always)]
    unsafe fn half_done(&mut self) {
        if self.split {
            // SAFETY: the caller vouches for AVX2.
            let zero = unsafe { _mm256_setzero_si256() };
            self.first_half = Some(std::mem::replace(&mut self.iacc, [[[zero; 2]; R]; A]));
        }
    }

    /// The block's float epilogue with the tile's `scales` and `mins`.
    ///
    /// # Safety
    ///
    /// As for [`finish_block`].
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn finish<D: Dot>(
        mut self,
        scales: &[half::f16; TILE_N],
        mins: &[half::f16; TILE_N],
        x: &QuantizedRows,
        row0: usize,
        kbs: usize,
        kb: usize,
        facc: &mut [[__m256; 2]; R],
    ) {
        // SAFETY: (the whole body) the caller vouches for the features and the bounds.
        unsafe {
            for (s, accs) in self.iacc.iter_mut().enumerate() {
                for (r, acc) in accs.iter_mut().enumerate() {
                    for (h, acc) in acc.iter_mut().enumerate() {
                        *acc = D::widen_nibbles(*acc);
                        if let Some(first) = &self.first_half {
                            *acc = _mm256_add_epi32(*acc, D::widen_nibbles(first[s][r][h]));
                        }
                    }
                }
            }
            let (wscale, wmin) = (widen_halves(scales), widen_halves(mins));
            finish_block(
                x,
                row0,
                kbs,
                kb,
                &self.iacc,
                false,
                wscale,
                Some(wmin),
                facc,
            );
        }
    }
}

/// Blocks ahead of the one being multiplied whose weights are asked for early.
const PREFETCH_BLOCKS: usize = 4;

/// Asks the cache for the weights `PREFETCH_BLOCKS` blocks after `tile` (the next tile's, past
/// the end of a tile row: tiles are stored in the order the tasks read them). A step's first
/// pass over a tile row otherwise waits on memory at every block, and AVX2 spends enough
/// cycles per block for the prefetch to arrive in time (`braid bench-engine --kernel avx2`
/// with and without it shows the gain; the AVX-512 kernel, which spends fewer cycles per
/// block, showed none, so it does not prefetch).
///
/// # Safety
///
/// None beyond the CPU having SSE (every x86-64 CPU); `unsafe` only so that it inlines into
/// the kernels' `#[target_feature]` functions like the rest of their code.
#[inline(always)]
unsafe fn prefetch_ahead<T>(tile: &T) {
    // `wrapping_add`: the address may lie past the weights; a prefetch never faults.
    let ahead = (tile as *const T).wrapping_add(PREFETCH_BLOCKS) as *const i8;
    for line in (0..std::mem::size_of::<T>()).step_by(64) {
        // SAFETY: a prefetch reads nothing the program sees and does not fault.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line)) };
    }
}
