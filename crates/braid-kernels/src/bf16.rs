//! bf16 weights times bf16 activations, summed in f32: the sentence models' matrix products.
//!
//! A sentence model comes as float weights and its vectors are held to cosine 0.9999 of the
//! float model. The generation model's int8 blocks miss that on all-MiniLM-L6-v2 (0.9993 at
//! worst, in a numpy emulation of braid's rounding), bf16 inputs keep it (0.99998), and
//! AVX-512 BF16's `vdpbf16ps` multiplies twice the pairs of an f32 FMA per instruction.
//!
//! Every path gives the same bits. The instruction, as Intel defines it, adds the odd element's
//! product and then the even one's into each f32 lane, rounding after each; a product of two
//! bf16 values is exact in f32, so each of those adds is one f32 FMA of the widened values.
//! CPUs without the instruction run exactly those FMAs, compiled for their float instruction
//! set ([`crate::FloatLoops`]); the tests compare the two where the CPU has both. Rounding to
//! bf16 is done here, nearest-even with subnormals flushed to zero, so the instruction's
//! flushing of subnormal inputs never meets one.

use crate::{Kernel, SendPtr, TILE_N};
use rayon::prelude::*;

/// Rows one task takes: its weight panels are read from cache this many rows at a time.
const TASK_ROWS: usize = 64;

/// `x` rounded to bf16 (to nearest, ties to even; subnormals and their rounding flushed to a
/// signed zero, NaN kept a quiet NaN).
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    if bits & 0x7f80_0000 == 0 {
        return ((bits >> 16) & 0x8000) as u16;
    }
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    (rounded >> 16) as u16
}

/// The f32 value of a bf16, exactly.
#[inline(always)]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Two bf16 values in one word, the even element low: how both operands are laid out.
#[inline(always)]
fn pair(even: f32, odd: f32) -> u32 {
    to_bf16(even) as u32 | (to_bf16(odd) as u32) << 16
}

/// A weight matrix of `n` outputs × `k` inputs in bf16, packed in tiles of [`TILE_N`] outputs:
/// for each pair of inputs, the 16 outputs' pairs side by side (one 512-bit load).
pub struct Bf16Weight {
    n: usize,
    k: usize,
    /// `[n_tiles][k / 2][TILE_N]`
    panels: Vec<u32>,
}

impl Bf16Weight {
    /// Rounds a row-major `n × k` f32 matrix (row i = output i). `k` must be even.
    pub fn from_f32(data: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(data.len(), n * k, "weight data does not match {n}x{k}");
        assert!(k.is_multiple_of(2), "k = {k} is not even");
        let kp = k / 2;
        let n_tiles = n.div_ceil(TILE_N);
        let mut panels = vec![0u32; n_tiles * kp * TILE_N];
        for row in 0..n {
            let (t, r) = (row / TILE_N, row % TILE_N);
            let w = &data[row * k..(row + 1) * k];
            for p in 0..kp {
                panels[(t * kp + p) * TILE_N + r] = pair(w[2 * p], w[2 * p + 1]);
            }
        }
        Self { n, k, panels }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn size_in_bytes(&self) -> usize {
        self.panels.len() * 4
    }
}

/// Activations rounded to bf16, `m` rows of `k`, in pairs.
#[derive(Default)]
pub struct Bf16Rows {
    m: usize,
    k: usize,
    pairs: Vec<u32>,
}

impl Bf16Rows {
    /// Rounds `m` rows of `k` values (row-major, `k` even) into `self`, reusing its buffer;
    /// over the compute threads when there are many rows.
    pub fn round(&mut self, x: &[f32], m: usize, k: usize) {
        assert!(k.is_multiple_of(2) && x.len() >= m * k);
        self.m = m;
        self.k = k;
        self.pairs.resize(m * k / 2, 0);
        let x = &x[..m * k];
        let round = |pairs: &mut [u32], x: &[f32]| {
            for (p, v) in pairs.iter_mut().zip(x.chunks_exact(2)) {
                *p = pair(v[0], v[1]);
            }
        };
        if m < crate::parallel_rows::PARALLEL_ROWS {
            return round(&mut self.pairs, x);
        }
        let rows = crate::parallel_rows::rows_per_task(m);
        self.pairs
            .par_chunks_mut(rows * k / 2)
            .zip(x.par_chunks(rows * k))
            .for_each(|(pairs, x)| round(pairs, x));
    }

    pub fn rows(&self) -> usize {
        self.m
    }

    pub fn k(&self) -> usize {
        self.k
    }
}

/// How this process multiplies bf16: the instruction, or its FMAs on a kernel's float set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16Path {
    /// `vdpbf16ps` on 512 bits (AVX-512 BF16).
    #[cfg(target_arch = "x86_64")]
    Avx512Bf16,
    /// f32 FMAs compiled for this kernel's float instruction set.
    Fma(Kernel),
}

impl Bf16Path {
    /// The path for the kernel in force: the instruction where an AVX-512 kernel runs (AMX's
    /// included) and the CPU has it, so that `BRAID_KERNEL=avx2` also keeps bf16 products off
    /// AVX-512.
    pub fn for_kernel(kernel: Kernel) -> Self {
        #[cfg(target_arch = "x86_64")]
        if matches!(kernel, Kernel::Avx512Vnni | Kernel::Amx) && crate::cpu_has("avx512bf16") {
            return Bf16Path::Avx512Bf16;
        }
        Bf16Path::Fma(kernel)
    }

    pub fn name(self) -> String {
        match self {
            #[cfg(target_arch = "x86_64")]
            Bf16Path::Avx512Bf16 => "avx512bf16".into(),
            Bf16Path::Fma(kernel) => format!("{kernel} fma"),
        }
    }
}

/// `out[m][n] = Σ_k x[m][k] · w[n][k]` on the path for the kernel in force, split across the
/// rayon pool by rows and output tiles.
pub fn matmul_bf16(x: &Bf16Rows, w: &Bf16Weight, out: &mut [f32]) {
    matmul_bf16_with(Bf16Path::for_kernel(crate::active()), x, w, out)
}

/// [`matmul_bf16`] on `path`, which must be one this CPU runs (it panics otherwise).
pub fn matmul_bf16_with(path: Bf16Path, x: &Bf16Rows, w: &Bf16Weight, out: &mut [f32]) {
    let (m, n) = (x.m, w.n);
    assert_eq!(x.k, w.k, "activation width does not match the weight");
    assert!(out.len() >= m * n);
    match path {
        #[cfg(target_arch = "x86_64")]
        Bf16Path::Avx512Bf16 => assert!(
            crate::cpu_has("avx512f") && crate::cpu_has("avx512bf16"),
            "this CPU has no AVX-512 BF16"
        ),
        Bf16Path::Fma(kernel) => {
            kernel.ops();
        }
    }
    if m == 0 || n == 0 {
        return;
    }
    let n_tiles = n.div_ceil(TILE_N);
    let row_tasks = m.div_ceil(TASK_ROWS);
    // Enough tasks to balance two uneven cores when there are few rows; tile ranges stay even
    // so that each inner block can take two tiles.
    let want = 4 * rayon::current_num_threads().max(1);
    let tile_tasks = want.div_ceil(row_tasks).clamp(1, n_tiles.div_ceil(2));
    let tiles_per_task = n_tiles.div_ceil(tile_tasks).next_multiple_of(2);
    let tile_tasks = n_tiles.div_ceil(tiles_per_task);
    let out = SendPtr::new(out.as_mut_ptr());
    (0..row_tasks * tile_tasks)
        .into_par_iter()
        .for_each(|task| {
            let (rt, tt) = (task / tile_tasks, task % tile_tasks);
            let task = Task {
                x,
                w,
                rows: rt * TASK_ROWS..((rt + 1) * TASK_ROWS).min(m),
                tiles: tt * tiles_per_task..((tt + 1) * tiles_per_task).min(n_tiles),
                out: out.get(),
            };
            // SAFETY: the path's features were checked above; `out` holds `m * n` floats (asserted)
            // and outlives the loop. Each task writes only its own rows × tiles, which no other
            // task writes or reads.
            unsafe {
                match path {
                    #[cfg(target_arch = "x86_64")]
                    Bf16Path::Avx512Bf16 => task.run_avx512bf16(),
                    Bf16Path::Fma(kernel) => kernel.ops().floats.run(task),
                }
            }
        });
}

/// One task's rows × output tiles.
struct Task<'a> {
    x: &'a Bf16Rows,
    w: &'a Bf16Weight,
    rows: std::ops::Range<usize>,
    tiles: std::ops::Range<usize>,
    out: *mut f32,
}

/// The inner block of each path: `R` rows × `T` tiles starting at `row` and `tile`, over the
/// task's rows and tiles. `wide` blocks are 8 rows × 2 tiles (16 registers of sums, half of
/// AVX-512's); `narrow` ones 6 rows × 1 tile, for float sets with 16 registers of 8 floats
/// (on AVX2, 1.7× the wide block's rate and 1.15× that of 4 rows).
macro_rules! each_block {
    ($task:expr, $block:ident, wide) => {
        each_block!(@ $task, $block, 2, [8, 7, 6, 5, 4, 3, 2])
    };
    ($task:expr, $block:ident, narrow) => {
        each_block!(@ $task, $block, 1, [6, 5, 4, 3, 2])
    };
    (@ $task:expr, $block:ident, $tiles:literal, [$($r:literal),*]) => {{
        let task = $task;
        let mut tile = task.tiles.start;
        while tile < task.tiles.end {
            let two = $tiles == 2 && tile + 1 < task.tiles.end;
            let mut row = task.rows.start;
            while row < task.rows.end {
                let r = (task.rows.end - row).min([$($r),*][0]);
                // SAFETY: the caller's (the enclosing `unsafe fn`'s contract).
                unsafe {
                    match (r, two) {
                        $(($r, true) => $block::<$r, 2>(task, row, tile),)*
                        (1, true) => $block::<1, 2>(task, row, tile),
                        $(($r, false) => $block::<$r, 1>(task, row, tile),)*
                        _ => $block::<1, 1>(task, row, tile),
                    }
                }
                row += r;
            }
            tile += if two { 2 } else { 1 };
        }
    }};
}

impl Task<'_> {
    /// Writes one block's sums: `acc[r][t]` holds outputs `(tile + t) · 16..` of row `row + r`,
    /// of which those past `n` (a last, partial tile's padding) are dropped.
    ///
    /// # Safety
    ///
    /// `out` must hold `m × n` floats, rows and tiles this task's own.
    #[inline(always)]
    unsafe fn store<const R: usize, const T: usize>(
        &self,
        row: usize,
        tile: usize,
        acc: &[[[f32; TILE_N]; T]; R],
    ) {
        let n = self.w.n;
        for (r, tiles) in acc.iter().enumerate() {
            for (t, sums) in tiles.iter().enumerate() {
                let col = (tile + t) * TILE_N;
                let dst = (row + r) * n + col;
                // SAFETY: the caller's; `row + r < m` and `col + 16 <= n` or `col + cols = n`.
                unsafe {
                    if col + TILE_N <= n {
                        self.out
                            .add(dst)
                            .cast::<[f32; TILE_N]>()
                            .write_unaligned(*sums);
                    } else {
                        std::ptr::copy_nonoverlapping(sums.as_ptr(), self.out.add(dst), n - col);
                    }
                }
            }
        }
    }

    /// # Safety
    ///
    /// The CPU must have AVX-512 F and BF16; as [`Self::store`] for `out`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn run_avx512bf16(self) {
        each_block!(&self, avx512bf16_block, wide);
    }
}

/// # Safety
///
/// As [`Task::run_avx512bf16`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn avx512bf16_block<const R: usize, const T: usize>(task: &Task, row: usize, tile: usize) {
    use std::arch::x86_64::*;
    let kp = task.x.k / 2;
    let x = &task.x.pairs[row * kp..(row + R) * kp];
    let w = &task.w.panels[tile * kp * TILE_N..(tile + T) * kp * TILE_N];
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    for p in 0..kp {
        // SAFETY: `w` holds `T` tiles of `kp` pairs of 16 words; the loads are unaligned.
        let wv: [__m512bh; T] = std::array::from_fn(|t| unsafe {
            std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                w[(t * kp + p) * TILE_N..].as_ptr().cast(),
            ))
        });
        for r in 0..R {
            // SAFETY: a 32-bit broadcast, and the caller vouches for AVX-512 BF16.
            unsafe {
                let xb = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                    x[r * kp + p] as i32,
                ));
                for t in 0..T {
                    acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[t], xb);
                }
            }
        }
    }
    // SAFETY: `__m512` and `[f32; 16]` are the same 64 bytes.
    let acc: [[[f32; TILE_N]; T]; R] = unsafe { std::mem::transmute_copy(&acc) };
    // SAFETY: the caller's.
    unsafe { task.store(row, tile, &acc) }
}

/// The instruction's arithmetic as FMAs, compiled for the kernel's float set: per pair, the
/// odd element's product, then the even one's.
///
/// # Safety
///
/// As [`Task::store`].
#[inline(always)]
unsafe fn fma_block<const R: usize, const T: usize>(task: &Task, row: usize, tile: usize) {
    let kp = task.x.k / 2;
    let x = &task.x.pairs[row * kp..(row + R) * kp];
    let w = &task.w.panels[tile * kp * TILE_N..(tile + T) * kp * TILE_N];
    let mut acc = [[[0f32; TILE_N]; T]; R];
    for p in 0..kp {
        let mut even = [[0f32; TILE_N]; T];
        let mut odd = [[0f32; TILE_N]; T];
        for t in 0..T {
            let panel = &w[(t * kp + p) * TILE_N..][..TILE_N];
            for j in 0..TILE_N {
                even[t][j] = bf16_to_f32(panel[j] as u16);
                odd[t][j] = bf16_to_f32((panel[j] >> 16) as u16);
            }
        }
        for r in 0..R {
            let xp = x[r * kp + p];
            let (xe, xo) = (bf16_to_f32(xp as u16), bf16_to_f32((xp >> 16) as u16));
            for t in 0..T {
                for j in 0..TILE_N {
                    let a = odd[t][j].mul_add(xo, acc[r][t][j]);
                    acc[r][t][j] = even[t][j].mul_add(xe, a);
                }
            }
        }
    }
    // SAFETY: the caller's.
    unsafe { task.store(row, tile, &acc) }
}

impl crate::FloatLoops for Task<'_> {
    type Output = ();

    #[inline(always)]
    unsafe fn run<L: crate::Lanes>(self) {
        if L::ACCUMULATORS >= 12 {
            each_block!(&self, fma_block, wide);
        } else {
            each_block!(&self, fma_block, narrow);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
            })
            .collect()
    }

    fn paths() -> Vec<Bf16Path> {
        #[cfg(target_arch = "x86_64")]
        let native = (crate::cpu_has("avx512f") && crate::cpu_has("avx512bf16"))
            .then_some(Bf16Path::Avx512Bf16);
        #[cfg(not(target_arch = "x86_64"))]
        let native = None;
        Kernel::supported()
            .into_iter()
            .map(Bf16Path::Fma)
            .chain(native)
            .collect()
    }

    #[test]
    fn rounding_is_nearest_even_and_flushes_subnormals() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(to_bf16(-2.5), 0xc020);
        assert_eq!(to_bf16(f32::from_bits(1)), 0);
        assert_eq!(to_bf16(-f32::from_bits(0x007f_ffff)), 0x8000);
        assert_eq!(to_bf16(f32::MAX), 0x7f80, "rounds up to infinity");
        assert!(bf16_to_f32(to_bf16(f32::NAN)).is_nan());
        for x in random(1000, 3) {
            let back = bf16_to_f32(to_bf16(x));
            assert!((back - x).abs() <= x.abs() / 256.0, "{x} -> {back}");
        }
    }

    /// Every path against every other, bit for bit, and against an f64 sum of the rounded
    /// values, over shapes with partial row blocks, an odd count of tiles and a partial tile.
    #[test]
    fn every_path_gives_the_same_bits_close_to_the_exact_sum() {
        for (m, n, k) in [
            (1, 16, 2),
            (3, 40, 64),
            (13, 48, 384),
            (70, 33, 130),
            (9, 1, 4),
        ] {
            let (xs, ws) = (random(m * k, m as u64), random(n * k, n as u64 + 7));
            let mut rows = Bf16Rows::default();
            rows.round(&xs, m, k);
            let w = Bf16Weight::from_f32(&ws, n, k);
            let mut first: Option<(Bf16Path, Vec<f32>)> = None;
            for path in paths() {
                let mut out = vec![f32::NAN; m * n];
                matmul_bf16_with(path, &rows, &w, &mut out);
                match &first {
                    None => first = Some((path, out)),
                    Some((p0, o0)) => {
                        for (i, (a, b)) in o0.iter().zip(&out).enumerate() {
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "{m}x{n}x{k}: {p0:?} and {path:?} differ at {i}: {a} vs {b}"
                            );
                        }
                    }
                }
            }
            let (_, out) = first.expect("a path");
            for i in 0..m {
                for j in 0..n {
                    let (mut exact, mut size) = (0f64, 0f64);
                    for c in 0..k {
                        let a = bf16_to_f32(to_bf16(xs[i * k + c])) as f64;
                        let b = bf16_to_f32(to_bf16(ws[j * k + c])) as f64;
                        exact += a * b;
                        size += (a * b).abs();
                    }
                    let got = out[i * n + j] as f64;
                    assert!(
                        (got - exact).abs() <= 1e-6 * size + 1e-30,
                        "{m}x{n}x{k} [{i}][{j}]: {got} vs {exact}"
                    );
                }
            }
        }
    }
}
