//! The checks every weight format's tests run, written once: each kernel this CPU has against
//! the portable reference bit for bit, the AVX-VNNI code through its EVEX twin, and rows that do
//! not depend on the batch they are in. A format's tests bring the weights; these bring the
//! verdict.

#[cfg(target_arch = "x86_64")]
use super::TILE_N;
use super::{matmul_reference, matmul_with, Kernel, PackedWeight, QuantizedRows};
use rand::{Rng, SeedableRng};

/// `len` values uniform in [-1, 1), the same for the same seed.
pub(super) fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

pub(super) fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `x` (`m` rows of `k`) quantized as a step quantizes activations.
pub(super) fn quantized(x: &[f32], m: usize, k: usize) -> QuantizedRows {
    let mut q = QuantizedRows::default();
    q.quantize(x, m, k);
    q
}

/// Every kernel this CPU runs writes exactly the reference's bits for `q × w`, and nothing
/// past the `m × n` output (a canary after it stays untouched).
pub(super) fn assert_every_kernel_matches_reference(
    q: &QuantizedRows,
    w: &PackedWeight,
    label: &str,
) {
    let (m, n) = (q.m, w.n());
    let mut slow = vec![0f32; m * n];
    matmul_reference(q, w, &mut slow);
    let kernels = Kernel::supported();
    assert!(kernels.contains(&Kernel::Portable));
    for kernel in kernels {
        let mut fast = vec![f32::NAN; m * n + 1];
        matmul_with(kernel, q, w, &mut fast);
        assert_eq!(
            bits(&fast[..m * n]),
            bits(&slow),
            "{kernel} on {label} {m}x{n}"
        );
        assert!(
            fast[m * n].is_nan(),
            "{kernel} wrote past {m}x{n} on {label}"
        );
    }
}

/// The AVX-VNNI kernel's code with the EVEX form of its instruction (see
/// `avx2::matmul_tiles_evex256`) writes the reference's bits, in one call over every tile and
/// tile by tile (as the tasks split them). It runs on CPUs that have AVX-512 VNNI but not
/// AVX-VNNI, where [`assert_every_kernel_matches_reference`] cannot reach that code; elsewhere
/// it says it skipped.
pub(super) fn assert_avx_vnni_code_matches_reference(
    q: &QuantizedRows,
    w: &PackedWeight,
    label: &str,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(miri)
            || !(is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
                && Kernel::Avx2.is_supported())
        {
            eprintln!("skipped: this CPU has no AVX-512 VL + VNNI");
            return;
        }
        let (m, n) = (q.m, w.n());
        let mut slow = vec![0f32; m * n];
        matmul_reference(q, w, &mut slow);
        let n_tiles = n.div_ceil(TILE_N);
        let mut fast = vec![f32::NAN; m * n];
        evex256(q, w, 0..n_tiles, &mut fast);
        assert_eq!(bits(&fast), bits(&slow), "{label} {m}x{n}");
        fast.fill(f32::NAN);
        for t in 0..n_tiles {
            evex256(q, w, t..t + 1, &mut fast);
        }
        assert_eq!(bits(&fast), bits(&slow), "{label} {m}x{n}, tile by tile");
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (q, w, label);
        eprintln!("skipped: not an x86 CPU");
    }
}

/// The AMX kernel's code on a model of the tile instructions writes the reference's bits, in
/// one call over every tile and tile by tile. It checks the kernel's layouts and finishing on
/// any CPU with AVX-512 VNNI; where the CPU has usable AMX,
/// [`assert_every_kernel_matches_reference`] also runs the instructions themselves.
pub(super) fn assert_amx_code_matches_reference(q: &QuantizedRows, w: &PackedWeight, label: &str) {
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(miri) || !Kernel::Avx512Vnni.is_supported() {
            eprintln!("skipped: this CPU has no AVX-512 VNNI, which the AMX kernel finishes with");
            return;
        }
        match super::amx::usable() {
            Ok(()) => eprintln!("AMX is usable here: the hardware runs in every_kernel_…"),
            Err(why) => eprintln!("AMX hardware not checked here ({why}); the tile model is"),
        }
        let (m, n) = (q.m, w.n());
        let mut slow = vec![0f32; m * n];
        matmul_reference(q, w, &mut slow);
        let n_tiles = n.div_ceil(TILE_N);
        let mut fast = vec![f32::NAN; m * n];
        amx_modelled(q, w, 0..n_tiles, &mut fast);
        assert_eq!(bits(&fast), bits(&slow), "{label} {m}x{n}");
        fast.fill(f32::NAN);
        for t in 0..n_tiles {
            amx_modelled(q, w, t..t + 1, &mut fast);
        }
        assert_eq!(bits(&fast), bits(&slow), "{label} {m}x{n}, tile by tile");
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (q, w, label);
        eprintln!("skipped: not an x86 CPU");
    }
}

/// The AMX kernel on the tile model over the tiles `tiles` of any format.
#[cfg(target_arch = "x86_64")]
fn amx_modelled(
    q: &QuantizedRows,
    w: &PackedWeight,
    tiles: std::ops::Range<usize>,
    out: &mut [f32],
) {
    use super::amx::{matmul_tiles, model::TileModel};
    assert!(out.len() >= q.m * w.n() && tiles.end <= w.n().div_ceil(TILE_N));
    let out = out.as_mut_ptr();
    // SAFETY: the caller checked the CPU's features; `out` holds `m * n` floats and is
    // borrowed mutably for the call.
    unsafe {
        match w {
            PackedWeight::Int8(w) => matmul_tiles::<TileModel, _>(q, &w.tiles, w.n, tiles, out),
            PackedWeight::Int4(w) => matmul_tiles::<TileModel, _>(q, &w.tiles, w.n, tiles, out),
            PackedWeight::Int5(w) => matmul_tiles::<TileModel, _>(q, &w.tiles, w.n, tiles, out),
        }
    }
}

/// The EVEX-encoded AVX-VNNI kernel over the tiles `tiles` of any format.
#[cfg(target_arch = "x86_64")]
fn evex256(q: &QuantizedRows, w: &PackedWeight, tiles: std::ops::Range<usize>, out: &mut [f32]) {
    assert!(out.len() >= q.m * w.n() && tiles.end <= w.n().div_ceil(TILE_N));
    let out = out.as_mut_ptr();
    // SAFETY: the caller checked the CPU's features; `out` holds `m * n` floats and is
    // borrowed mutably for the call.
    unsafe {
        match w {
            PackedWeight::Int8(w) => {
                super::avx2::matmul_tiles_evex256(q, &w.tiles, w.n, tiles, out)
            }
            PackedWeight::Int4(w) => {
                super::avx2::matmul_tiles_evex256(q, &w.tiles, w.n, tiles, out)
            }
            PackedWeight::Int5(w) => {
                super::avx2::matmul_tiles_evex256(q, &w.tiles, w.n, tiles, out)
            }
        }
    }
}

/// Each row of `x` (`m` rows of `k`) times `w` alone gives the bits it gives in the batch of
/// all `m`, on every kernel.
pub(super) fn assert_rows_do_not_depend_on_batch(x: &[f32], m: usize, k: usize, w: &PackedWeight) {
    let n = w.n();
    let q = quantized(x, m, k);
    for kernel in Kernel::supported() {
        let mut all = vec![0f32; m * n];
        matmul_with(kernel, &q, w, &mut all);
        for row in 0..m {
            let one = quantized(&x[row * k..(row + 1) * k], 1, k);
            let mut out = vec![0f32; n];
            matmul_with(kernel, &one, w, &mut out);
            assert_eq!(
                bits(&out),
                bits(&all[row * n..(row + 1) * n]),
                "{kernel}: row {row} differs when batched"
            );
        }
    }
}
