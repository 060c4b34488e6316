//! The kernel on AMX (Intel Sapphire Rapids and later Xeons): one `tdpbssd` multiplies a tile
//! of 16 activation rows × 32 K bytes by a tile of the same 32 K × 16 output columns, 8,192
//! multiply-adds where a `vpdpbusd` does 64.
//!
//! Every format's blocks carry their own scales per 32 K values, so a tile multiply covers one
//! block: its 16 × 16 exact integer sums are stored and finished in AVX-512 registers with the
//! same IEEE operations, in the same order, as the VNNI kernel and the reference
//! ([`finish_block`]), which is what keeps the bits identical. The finishing is now most of
//! the work, so a prompt's matrix products gain about the share the integer sums had.
//!
//! Layouts, so that nothing is copied per row: the activation tile is 16 rows of a block read
//! in place (`QuantizedRows` keeps a row's blocks contiguous, so the rows are `k` bytes
//! apart), and signed, hence `tdpbssd` (signed × signed). The weight tile is the formats' own
//! tile layout, `qs[g]` = 16 columns × K values `4g..4g + 4`, which is exactly the layout
//! `tdpbssd` wants for its second operand; it only has to be signed: int8 weights stored +128
//! flip their top bit, 4- and 5-bit ones unpack to bytes of 0..31 as for the VNNI panels. A
//! tile row is made signed once per call and met by every 16-row panel. With the offset gone
//! from the weights, the integer sum is already the reference's (no `128 · Σa` correction).
//!
//! Steps of fewer than 16 rows (decoding) and the last rows of a prompt slice that do not fill a
//! tile take the VNNI kernel: same integers, same finishing, same bits.
//!
//! The tile instructions are behind [`TileUnit`]: the CPU's ([`Tiles`]), or a model of their
//! documented semantics in plain Rust that the tests run on any CPU with AVX-512, so that the
//! layouts and the finishing are checked where the hardware is missing. Linux lends a process
//! the tile registers only when asked (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), so the kernel is
//! offered only after that request succeeded and a self-check against the reference passed
//! ([`usable`], which says why not otherwise).

use super::int4::Unpacked;
use super::{int4, int5, int8, QuantizedRows, BLOCK, TILE_N};
use crate::avx512::{self, Block};
use crate::format_tile::FormatTile;
use crate::kernel_ops::{KernelOps, PeakOp};
use crate::FloatIsa;
use std::arch::asm;
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// The kernel table's row for AMX.
pub(crate) static OPS: KernelOps = KernelOps {
    int8: matmul_tiles::<Tiles, int8::Tile>,
    int4: matmul_tiles::<Tiles, int4::Tile>,
    int5: matmul_tiles::<Tiles, int5::Tile>,
    floats: FloatIsa::Avx512,
    peak: Some(PeakOp {
        macs: 16 * 16 * 64,
        run: peak_loop,
    }),
};

/// Activation rows per tile multiply: a tile's 16 rows.
const ROWS: usize = 16;

/// A tile configuration (palette 1): bytes per row and rows of each tile register.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    /// `tiles[i]` = (rows, bytes per row) of register `tmm{i}`; the rest are unused.
    const fn new(tiles: [(u8, u16); 8]) -> Self {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        let mut i = 0;
        while i < 8 {
            let (rows, colsb) = tiles[i];
            bytes[16 + 2 * i] = colsb as u8;
            bytes[17 + 2 * i] = (colsb >> 8) as u8;
            bytes[48 + i] = rows;
            i += 1;
        }
        TileConfig(bytes)
    }
}

/// The matrix products' registers: `tmm0`, `tmm1` the 16 × 16 int32 sums of two blocks,
/// `tmm2`, `tmm3` their 16 activation rows × 32 bytes, `tmm4`, `tmm5` their weights
/// (8 groups of 4 K × 16 columns).
static KERNEL_CONFIG: TileConfig = TileConfig::new([
    (16, 64),
    (16, 64),
    (16, 32),
    (16, 32),
    (8, 64),
    (8, 64),
    (0, 0),
    (0, 0),
]);

/// The peak loop's registers: four sums and the full-depth operands (K = 64).
static PEAK_CONFIG: TileConfig = TileConfig::new([(16, 64); 8]);

/// The 16 × 16 int32 sums of two blocks, where the tile unit stores them for the finishing.
#[repr(C, align(64))]
pub(crate) struct Sums([[[i32; TILE_N]; ROWS]; 2]);

/// The tile instructions the kernel uses, as compound steps.
pub(crate) trait TileUnit {
    /// Loads the kernel's configuration.
    ///
    /// # Safety
    ///
    /// The process has the tile state (`usable`), for the hardware unit.
    unsafe fn configure();

    /// Releases the tile registers.
    ///
    /// # Safety
    ///
    /// As for [`TileUnit::configure`].
    unsafe fn release();

    /// `sums[i]` = the 16 rows at `a[i]` (`stride` bytes apart, 32 signed bytes each) times
    /// the weight tile at `b[i]` (8 rows of 64 signed bytes), for the first `N` of `i`.
    ///
    /// # Safety
    ///
    /// Configured; the pointers are valid for those reads.
    unsafe fn products<const N: usize>(
        a: [*const i8; 2],
        stride: usize,
        b: [*const u8; 2],
        sums: &mut Sums,
    );
}

/// The CPU's tile registers.
pub(crate) struct Tiles;

impl TileUnit for Tiles {
    #[inline(always)]
    unsafe fn configure() {
        // SAFETY: our caller's promise; the configuration is valid for palette 1.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) KERNEL_CONFIG.0.as_ptr(), options(nostack, readonly))
        };
    }

    #[inline(always)]
    unsafe fn release() {
        // SAFETY: our caller's promise.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }

    #[inline(always)]
    unsafe fn products<const N: usize>(
        a: [*const i8; 2],
        stride: usize,
        b: [*const u8; 2],
        sums: &mut Sums,
    ) {
        let c = sums.0.as_mut_ptr();
        let row_bytes = 4 * TILE_N;
        // SAFETY: configured, and the operands are valid (our caller's promise); `c` holds two
        // 16 × 64-byte tiles.
        unsafe {
            if N == 2 {
                asm!(
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tileloadd tmm2, [{a0} + {s}*1]",
                    "tileloadd tmm3, [{a1} + {s}*1]",
                    "tileloadd tmm4, [{b0} + {w}*1]",
                    "tileloadd tmm5, [{b1} + {w}*1]",
                    "tdpbssd tmm0, tmm2, tmm4",
                    "tdpbssd tmm1, tmm3, tmm5",
                    "tilestored [{c0} + {w}*1], tmm0",
                    "tilestored [{c1} + {w}*1], tmm1",
                    a0 = in(reg) a[0],
                    a1 = in(reg) a[1],
                    b0 = in(reg) b[0],
                    b1 = in(reg) b[1],
                    c0 = in(reg) c,
                    c1 = in(reg) c.add(1),
                    s = in(reg) stride,
                    w = in(reg) row_bytes,
                    out("tmm0") _,
                    out("tmm1") _,
                    out("tmm2") _,
                    out("tmm3") _,
                    out("tmm4") _,
                    out("tmm5") _,
                    options(nostack, preserves_flags),
                );
            } else {
                asm!(
                    "tilezero tmm0",
                    "tileloadd tmm2, [{a0} + {s}*1]",
                    "tileloadd tmm4, [{b0} + {w}*1]",
                    "tdpbssd tmm0, tmm2, tmm4",
                    "tilestored [{c0} + {w}*1], tmm0",
                    a0 = in(reg) a[0],
                    b0 = in(reg) b[0],
                    c0 = in(reg) c,
                    s = in(reg) stride,
                    w = in(reg) row_bytes,
                    out("tmm0") _,
                    out("tmm2") _,
                    out("tmm4") _,
                    options(nostack, preserves_flags),
                );
            }
        }
    }
}

/// How a format's block becomes the signed weight tile `tdpbssd` takes.
pub(crate) trait SignedBlock: Block {
    /// Whether the format adds a per-block minimum times the activations' sum.
    const MINS: bool;

    /// The block's weights as signed bytes in the tile layout, with its scales (and minimums).
    ///
    /// # Safety
    ///
    /// The CPU has AVX-512 F/BW.
    unsafe fn signed(&self) -> Unpacked;
}

impl SignedBlock for int8::Tile {
    const MINS: bool = false;

    #[inline(always)]
    unsafe fn signed(&self) -> Unpacked {
        let mut out = Unpacked {
            qs: self.qs,
            scales: self.scales,
            mins: [half::f16::ZERO; TILE_N],
            five_bits: false,
        };
        // Stored +128: flipping the top bit gives the signed weight.
        for g in out.qs.iter_mut() {
            let p = g.as_mut_ptr() as *mut __m512i;
            // SAFETY: `g` is 64 bytes, 64-aligned (the tile's alignment); AVX-512 is present.
            unsafe {
                _mm512_store_si512(
                    p,
                    _mm512_xor_si512(_mm512_load_si512(p), _mm512_set1_epi8(-128)),
                )
            };
        }
        out
    }
}

impl SignedBlock for int4::Tile {
    const MINS: bool = true;

    #[inline(always)]
    unsafe fn signed(&self) -> Unpacked {
        // SAFETY: our caller's promise. Unpacked nibbles are 0..15, signed as they are.
        unsafe { self.unpacked() }.expect("4-bit blocks unpack")
    }
}

impl SignedBlock for int5::Tile {
    const MINS: bool = true;

    #[inline(always)]
    unsafe fn signed(&self) -> Unpacked {
        // SAFETY: as for the 4-bit tile; 5-bit integers are 0..31.
        unsafe { self.unpacked() }.expect("5-bit blocks unpack")
    }
}

/// The AMX kernel on the tile unit `U` for the tiles `tiles` of a weight `n` outputs wide
/// whose tiles are `weights` (`[n_tiles][k_blocks]`): writes exactly what the format's
/// `reference_tiles` writes, with the same values.
///
/// # Safety
///
/// The CPU has AVX-512 F/BW/VNNI and F16C, and for the hardware unit the process has the tile
/// state ([`usable`]). `out` as for the VNNI kernel.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
pub(crate) unsafe fn matmul_tiles<U: TileUnit, T: SignedBlock>(
    x: &QuantizedRows,
    weights: &[T],
    n: usize,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
) {
    let (m, kbs) = (x.m, x.k_blocks);
    let full = m / ROWS * ROWS;
    if full > 0 {
        let mut signed = Vec::with_capacity(kbs);
        let mut sums = Sums([[[0; TILE_N]; ROWS]; 2]);
        // SAFETY: our caller's promise.
        unsafe { U::configure() };
        for t in tiles.clone() {
            signed.clear();
            // A loop, not a closure: a closure would not inherit the caller's features, and
            // every intrinsic in it would become a call.
            for block in &weights[t * kbs..(t + 1) * kbs] {
                // SAFETY: AVX-512 is present (our caller's promise).
                signed.push(unsafe { block.signed() });
            }
            for row0 in (0..full).step_by(ROWS) {
                // SAFETY: `row0 + 16 <= m`, `signed` is tile `t`'s `kbs` blocks; the rest is
                // our caller's.
                unsafe { panel::<U, T>(x, &signed, row0, &mut sums, out, n, t) };
            }
        }
        // SAFETY: configured above.
        unsafe { U::release() };
    }
    if full < m {
        // SAFETY: our caller's promise, which is the VNNI kernel's for these rows.
        unsafe { avx512::matmul_rows::<T>(x, weights, n, tiles, full..m, out) };
    }
}

/// Rows `row0..row0 + 16` times tile `t`, whose blocks made signed are `blocks`.
///
/// # Safety
///
/// `row0 + 16 <= x.rows()`, `blocks.len() == x.k_blocks`, `U` configured, `out` as for
/// [`matmul_tiles`].
#[inline(always)]
unsafe fn panel<U: TileUnit, T: SignedBlock>(
    x: &QuantizedRows,
    blocks: &[Unpacked],
    row0: usize,
    sums: &mut Sums,
    out: *mut f32,
    n: usize,
    t: usize,
) {
    let kbs = x.k_blocks;
    let stride = kbs * BLOCK;
    let a = |kb: usize| x.qs[(row0 * kbs + kb) * BLOCK..].as_ptr();
    let b = |kb: usize| blocks[kb].qs.as_ptr() as *const u8;
    let mut facc = [_mm512_setzero_ps(); ROWS];
    let mut kb = 0;
    while kb + 2 <= kbs {
        // SAFETY: rows `row0..row0 + 16` of blocks `kb` and `kb + 1` lie in `x.qs`, `stride`
        // apart; the weight tiles are 512 bytes each.
        unsafe { U::products::<2>([a(kb), a(kb + 1)], stride, [b(kb), b(kb + 1)], sums) };
        for (i, s) in sums.0.iter().enumerate() {
            // SAFETY: our caller's promise.
            unsafe { finish_block::<T>(s, &blocks[kb + i], x, row0, kb + i, &mut facc) };
        }
        kb += 2;
    }
    if kb < kbs {
        // SAFETY: as above, for the last block.
        unsafe { U::products::<1>([a(kb), a(kb)], stride, [b(kb), b(kb)], sums) };
        // SAFETY: our caller's promise.
        unsafe { finish_block::<T>(&sums.0[0], &blocks[kb], x, row0, kb, &mut facc) };
    }
    let valid = TILE_N.min(n - t * TILE_N);
    let mask: __mmask16 = if valid == TILE_N {
        0xFFFF
    } else {
        (1u16 << valid) - 1
    };
    for (r, total) in facc.iter().enumerate() {
        // SAFETY: row `row0 + r < m`, columns of `mask` below `n`: inside `out`, ours alone.
        unsafe { _mm512_mask_storeu_ps(out.add((row0 + r) * n + t * TILE_N), mask, *total) };
    }
}

/// Adds block `kb` to the 16 rows' float sums: `total += f(Σ) · (d_w · d_x)`, then for formats
/// with minimums `total += m_w · s_x`, as the reference and the VNNI kernel order them.
///
/// # Safety
///
/// AVX-512 F and F16C; `row0 + 16 <= x.rows()`, `kb < x.k_blocks`.
#[inline(always)]
unsafe fn finish_block<T: SignedBlock>(
    sums: &[[i32; TILE_N]; ROWS],
    block: &Unpacked,
    x: &QuantizedRows,
    row0: usize,
    kb: usize,
    facc: &mut [__m512; ROWS],
) {
    let kbs = x.k_blocks;
    let wscale = _mm512_cvtph_ps(_mm256_loadu_si256(block.scales.as_ptr() as *const __m256i));
    let wmin = _mm512_cvtph_ps(_mm256_loadu_si256(block.mins.as_ptr() as *const __m256i));
    for (r, total) in facc.iter_mut().enumerate() {
        // Below `m * kbs`, the length of `scales` and `sums` (our caller's promise).
        let b = (row0 + r) * kbs + kb;
        let f = _mm512_cvtepi32_ps(_mm512_loadu_si512(sums[r].as_ptr() as *const __m512i));
        // SAFETY: `b` is in bounds (above).
        let s = _mm512_mul_ps(
            wscale,
            _mm512_set1_ps(unsafe { *x.scales.get_unchecked(b) }),
        );
        *total = _mm512_fmadd_ps(f, s, *total);
        if T::MINS {
            // SAFETY: as above.
            let sum = unsafe { *x.sums.get_unchecked(b) };
            *total = _mm512_fmadd_ps(wmin, _mm512_set1_ps(sum), *total);
        }
    }
}

/// `iters` × 12 full-depth tile multiplies (16 × 16 × 64 multiply-adds each) into four
/// independent sums.
///
/// # Safety
///
/// The process has the tile state ([`usable`]).
unsafe fn peak_loop(iters: usize) -> i32 {
    // SAFETY: our caller's promise; the configuration is valid for palette 1.
    unsafe {
        asm!(
            "ldtilecfg [{cfg}]",
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tilezero tmm4",
            "tilezero tmm5",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "tdpbssd tmm0, tmm4, tmm5",
            "tdpbssd tmm1, tmm4, tmm5",
            "tdpbssd tmm2, tmm4, tmm5",
            "tdpbssd tmm3, tmm4, tmm5",
            "tdpbssd tmm0, tmm4, tmm5",
            "tdpbssd tmm1, tmm4, tmm5",
            "tdpbssd tmm2, tmm4, tmm5",
            "tdpbssd tmm3, tmm4, tmm5",
            "tdpbssd tmm0, tmm4, tmm5",
            "tdpbssd tmm1, tmm4, tmm5",
            "tdpbssd tmm2, tmm4, tmm5",
            "tdpbssd tmm3, tmm4, tmm5",
            "dec {n}",
            "jnz 2b",
            "3:",
            "tilerelease",
            cfg = in(reg) PEAK_CONFIG.0.as_ptr(),
            n = inout(reg) iters => _,
            out("tmm0") _,
            out("tmm1") _,
            out("tmm2") _,
            out("tmm3") _,
            out("tmm4") _,
            out("tmm5") _,
            options(nostack),
        );
    }
    0
}

/// Whether this process can run the AMX kernel, or why not: the CPU must report AMX-TILE and
/// AMX-INT8 (and the AVX-512 the finishing uses), Linux must lend the process the tile state,
/// and the kernel must give the reference's bits on a small product. Decided once.
pub fn usable() -> Result<(), &'static str> {
    static USABLE: OnceLock<Result<(), &'static str>> = OnceLock::new();
    *USABLE.get_or_init(|| {
        if !cpu_reports_amx() {
            return Err("this CPU does not report AMX-TILE and AMX-INT8");
        }
        if !(is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("f16c"))
        {
            return Err("this CPU has AMX but not the AVX-512 VNNI the kernel finishes with");
        }
        if cfg!(miri) {
            return Err("Miri interprets no tile instructions");
        }
        request_tile_state()?;
        if !self_check() {
            return Err("the AMX kernel's check at start gave other results than the reference");
        }
        Ok(())
    })
}

/// CPUID leaf 7: AMX-TILE (EDX bit 24) and AMX-INT8 (bit 25).
pub fn cpu_reports_amx() -> bool {
    if __get_cpuid_max(0).0 < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    edx & (1 << 24) != 0 && edx & (1 << 25) != 0
}

/// Asks Linux for the tile data state (`ARCH_REQ_XCOMP_PERM`, feature 18), which a process
/// must do before its first tile instruction.
fn request_tile_state() -> Result<(), &'static str> {
    #[cfg(target_os = "linux")]
    {
        const SYS_ARCH_PRCTL: i64 = 158;
        const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
        const XFEATURE_XTILEDATA: i64 = 18;
        let ret: i64;
        // SAFETY: the arch_prctl system call with two integer arguments; it reads and writes
        // no memory of ours.
        unsafe {
            asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => ret,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        match -ret {
            0 => Ok(()),
            // EINVAL, or ENOSYS before arch_prctl knew the request.
            22 | 38 => Err(
                "Linux does not lend the tile state (arch_prctl ARCH_REQ_XCOMP_PERM): \
                            a kernel before 5.16, or a VM without AMX",
            ),
            // ENOSPC: a thread's signal stack is too small for the tile state.
            28 => Err(
                "Linux refused the tile state: a thread's alternate signal stack is too \
                       small for it (arch_prctl ARCH_REQ_XCOMP_PERM gave ENOSPC)",
            ),
            _ => Err("Linux refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM failed)"),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err("braid asks for the tile state the Linux way, and this OS is not Linux")
    }
}

/// The kernel against the reference, as [`agrees_with_reference`] runs it.
fn self_check() -> bool {
    // SAFETY: the CPU has the features and the process the tile state (checked by our caller).
    unsafe { agrees_with_reference::<Tiles>() }
}

/// Whether the kernel on the tile unit `U` gives the reference's bits on every format (int8,
/// Q4_1 and Q5_0 weights), at a size with full 16-row panels, a partial one and an odd number
/// of blocks.
///
/// # Safety
///
/// As for [`matmul_tiles`].
unsafe fn agrees_with_reference<U: TileUnit>() -> bool {
    let (m, n, k) = (37, 40, 96);
    let x: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919) % 255) as f32 / 127.0 - 1.0)
        .collect();
    let w: Vec<f32> = (0..n * k)
        .map(|i| ((i * 104_729) % 251) as f32 / 125.0 - 1.0)
        .collect();
    // Q4_1 blocks: a scale, a minimum, 16 bytes of nibbles.
    let q4_1: Vec<u8> = (0..n * k / BLOCK)
        .flat_map(|b| {
            let (d, min) = (
                half::f16::from_f32(0.01 + b as f32 * 1e-4),
                half::f16::from_f32(-0.07),
            );
            let nibbles = (0..16).map(move |i| ((b * 31 + i * 17) % 256) as u8);
            d.to_le_bytes()
                .into_iter()
                .chain(min.to_le_bytes())
                .chain(nibbles)
        })
        .collect();
    // Q5_0 blocks: a scale, 32 fifth bits, 16 bytes of nibbles.
    let q5_0: Vec<u8> = (0..n * k / BLOCK)
        .flat_map(|b| {
            let d = half::f16::from_f32(0.02 - b as f32 * 1e-4);
            let bits = (0..20).map(move |i| ((b * 57 + i * 29) % 256) as u8);
            d.to_le_bytes().into_iter().chain(bits)
        })
        .collect();
    // Row by row: `quantize` spreads many rows over rayon's threads, and this runs while the
    // kernel table is decided, which a rayon task could be waiting on.
    let mut q = QuantizedRows::default();
    for row in x.chunks_exact(k) {
        let mut one = QuantizedRows::default();
        one.quantize(row, 1, k);
        q.qs.extend(one.qs);
        q.scales.extend(one.scales);
        q.corrections.extend(one.corrections);
        q.sums.extend(one.sums);
    }
    (q.m, q.k_blocks) = (m, k / BLOCK);
    let int8 = crate::Int8Weight::from_f32(&w, n, k);
    let int4 = crate::Int4Weight::from_gguf(crate::int4::Int4Source::Q4_1, &q4_1, n, k);
    let int5 = crate::Int5Weight::from_gguf(crate::int5::Int5Source::Q5_0, &q5_0, n, k);
    // SAFETY: our caller's promise.
    unsafe {
        same_as_reference::<U, _>(&q, &int8.tiles, n)
            && same_as_reference::<U, _>(&q, &int4.tiles, n)
            && same_as_reference::<U, _>(&q, &int5.tiles, n)
    }
}

/// Whether the kernel on `U` writes the reference's bits for `q` times the weight of `n`
/// outputs whose tiles are `tiles`.
///
/// # Safety
///
/// As for [`matmul_tiles`].
unsafe fn same_as_reference<U: TileUnit, T: SignedBlock + FormatTile>(
    q: &QuantizedRows,
    tiles: &[T],
    n: usize,
) -> bool {
    let (m, n_tiles) = (q.m, n.div_ceil(TILE_N));
    let mut want = vec![0f32; m * n];
    let mut got = vec![f32::NAN; m * n];
    // SAFETY: both outputs hold the `m × n` product; the rest is our caller's promise.
    unsafe {
        T::reference_tiles(q, tiles, n, 0..n_tiles, want.as_mut_ptr());
        matmul_tiles::<U, T>(q, tiles, n, 0..n_tiles, got.as_mut_ptr());
    }
    got.iter()
        .zip(&want)
        .all(|(g, w)| g.to_bits() == w.to_bits())
}

/// The tile instructions' documented semantics in plain Rust, for the tests: what the kernel
/// computes on a CPU without AMX, through the same layouts and finishing.
#[cfg(test)]
pub(crate) mod model {
    use super::{Sums, TileUnit, ROWS, TILE_N};
    use crate::BLOCK;

    pub(crate) struct TileModel;

    impl TileUnit for TileModel {
        unsafe fn configure() {}

        unsafe fn release() {}

        unsafe fn products<const N: usize>(
            a: [*const i8; 2],
            stride: usize,
            b: [*const u8; 2],
            sums: &mut Sums,
        ) {
            for i in 0..N {
                for m in 0..ROWS {
                    for col in 0..TILE_N {
                        let mut s = 0i32;
                        for g in 0..BLOCK / 4 {
                            for j in 0..4 {
                                // SAFETY: our caller's promise: 16 rows of 32 bytes `stride`
                                // apart, and 8 rows of 64 weight bytes.
                                let (x, w) = unsafe {
                                    (
                                        *a[i].add(m * stride + 4 * g + j),
                                        *b[i].add(g * 4 * TILE_N + 4 * col + j) as i8,
                                    )
                                };
                                s += x as i32 * w as i32;
                            }
                        }
                        sums.0[i][m][col] = s;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::model::TileModel;
    use super::*;
    use crate::Kernel;

    /// The model with one product off by one: a tile unit the check must refuse.
    struct OffByOne;

    impl TileUnit for OffByOne {
        unsafe fn configure() {}

        unsafe fn release() {}

        unsafe fn products<const N: usize>(
            a: [*const i8; 2],
            stride: usize,
            b: [*const u8; 2],
            sums: &mut Sums,
        ) {
            // SAFETY: our caller's promise, passed on.
            unsafe { TileModel::products::<N>(a, stride, b, sums) };
            sums.0[0][3][5] += 1;
        }
    }

    #[test]
    fn the_check_at_start_passes_the_kernel_and_fails_a_wrong_one() {
        if !Kernel::Avx512Vnni.is_supported() {
            eprintln!("skipped: this CPU has no AVX-512 VNNI, which the AMX kernel finishes with");
            return;
        }
        // SAFETY: the CPU has the features (checked above); the model needs no tile state.
        unsafe {
            assert!(agrees_with_reference::<TileModel>());
            assert!(!agrees_with_reference::<OffByOne>());
        }
    }

    #[test]
    fn the_reason_names_what_is_missing() {
        match usable() {
            Ok(()) => eprintln!("AMX is usable on this machine"),
            Err(why) => {
                assert!(why.contains("AMX") || why.contains("tile"), "{why}");
                let reason = Kernel::Amx
                    .unsupported_reason()
                    .expect("amx is unsupported here");
                assert!(
                    reason.contains("amx-tile") || reason.contains(why),
                    "{reason} against {why}"
                );
            }
        }
    }
}
