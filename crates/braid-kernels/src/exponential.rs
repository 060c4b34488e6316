//! The exponential of the softmax, the embedding model's GELU and the model's gates:
//! Cephes' `expf` for `x <= 0`, written once as scalar code that the compiler vectorizes on
//! every instruction set, and once more in AVX-512 intrinsics for the loops that must run
//! inside an AVX-512 BF16 entry point (a prompt's bf16 softmax weights,
//! [`crate::attention_bf16_native`]). Both are the same sequence of IEEE operations, so they
//! give the same bits, which the tests check.

/// ln 2 in two parts, the first with few enough bits that `n · LN2_HI` is exact.
const LN2_HI: f32 = -0.693_359_4;
const LN2_LO: f32 = 2.121_944_4e-4;
/// The polynomial's coefficients, highest degree first, after the leading one.
const P0: f32 = 1.987_569_1e-4;
const COEFFICIENTS: [f32; 5] = [
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];
/// The arguments below which the result stays at about 1e-38.
const LOWEST: f32 = -87.0;

/// `e^x` for `x <= 0` to about 2 ulp (Cephes' `expf`): `x = n·ln 2 + r`, a degree-6 polynomial
/// in `r`, times `2^n` built from the exponent bits. Below -87 it returns ~1e-38, which is 0
/// for a softmax.
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    let x = x.clamp(LOWEST, 0.0);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = n.mul_add(LN2_HI, x);
    let r = n.mul_add(LN2_LO, r);
    let mut p = P0;
    for c in COEFFICIENTS {
        p = p.mul_add(r, c);
    }
    let e = p.mul_add(r * r, r) + 1.0;
    // 2^n from n's bits, with no float-to-int cast: a cast saturates and maps NaN to 0, which
    // the compiler checked one lane at a time and which made the softmax a third of a long
    // prompt's attention. `n` is a whole number in [-126, 0], so `n + 1.5·2^23` holds it in its
    // low mantissa bits exactly, and the bits are those of `(n as i32 + 127) << 23`.
    const WHOLE: f32 = 12_582_912.0;
    let biased = (n + WHOLE)
        .to_bits()
        .wrapping_sub(WHOLE.to_bits())
        .wrapping_add(127);
    e * f32::from_bits(biased << 23)
}

/// [`exp_approx`] of 16 lanes. The power of two is applied with `vscalefps`, which rounds
/// `e · 2^n` once, as the product with `2^n`'s float does; `n` is a whole number from -126 to
/// 0, so that float is normal and exact.
///
/// # Safety
///
/// The CPU must have AVX-512F, and the caller must be compiled with it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn exp_approx_512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // Rust's `clamp`, NaN kept: `max` and `min` return their second operand when either is NaN.
    let x = _mm512_max_ps(_mm512_set1_ps(LOWEST), x);
    let x = _mm512_min_ps(_mm512_setzero_ps(), x);
    let t = _mm512_add_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        _mm512_set1_ps(0.5),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(t);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(P0);
    for c in COEFFICIENTS {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let e = _mm512_add_ps(
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
        _mm512_set1_ps(1.0),
    );
    _mm512_scalef_ps(e, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_approx_is_within_a_few_ulp() {
        for i in 0..=100_000 {
            let x = -90.0 * i as f32 / 100_000.0;
            let (got, want) = (exp_approx(x), x.exp());
            if x < -87.0 {
                assert!(got < 1.7e-38, "e^{x}: {got}");
            } else {
                assert!(
                    ((got - want) / want).abs() < 4.0 * f32::EPSILON,
                    "e^{x}: {got} vs {want}"
                );
            }
        }
        assert_eq!(exp_approx(0.0), 1.0);
    }

    /// The power of two is built from the bits of `n + 1.5·2^23`; it must be the one a cast
    /// of `n` to an integer gives, for every `n` the clamped input reaches.
    #[test]
    fn exp_approx_scales_by_the_cast_power_of_two() {
        for n in -126..=0 {
            let x = n as f32 * std::f32::consts::LN_2;
            let n = (x.clamp(-87.0, 0.0) * std::f32::consts::LOG2_E + 0.5).floor();
            let by_cast = f32::from_bits(((n as i32 + 127) << 23) as u32);
            let whole = 12_582_912f32;
            let by_bits = f32::from_bits(
                (n + whole)
                    .to_bits()
                    .wrapping_sub(whole.to_bits())
                    .wrapping_add(127)
                    << 23,
            );
            assert_eq!(by_bits.to_bits(), by_cast.to_bits(), "2^{n}");
        }
    }

    /// Arguments a softmax meets: a sweep from 0 to -90, every power of two's neighbours, and the
    /// specials.
    #[cfg(target_arch = "x86_64")]
    fn arguments() -> Vec<f32> {
        let mut xs: Vec<f32> = (0..=200_000)
            .map(|i| -90.0 * i as f32 / 200_000.0)
            .collect();
        for e in -149..=127 {
            let x = -(2f32.powi(e));
            xs.extend([
                x,
                f32::from_bits(x.to_bits() + 1),
                f32::from_bits(x.to_bits() - 1),
            ]);
        }
        xs.extend([
            0.0,
            -0.0,
            1.0,
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7fa0_0001),
            -87.0,
            -87.000_01,
            -86.999_99,
        ]);
        xs
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx512_lanes_give_the_scalar_bits() {
        use std::arch::x86_64::*;
        if !crate::cpu_has("avx512f") {
            eprintln!("skipped: this CPU has no AVX-512F");
            return;
        }
        #[target_feature(enable = "avx512f")]
        unsafe fn lanes(xs: &[f32], out: &mut [f32]) {
            for (x, o) in xs.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
                // SAFETY: 16 floats each; the CPU has AVX-512F (checked by the test).
                unsafe {
                    _mm512_storeu_ps(o.as_mut_ptr(), exp_approx_512(_mm512_loadu_ps(x.as_ptr())))
                };
            }
        }
        let mut xs = arguments();
        xs.resize(xs.len().next_multiple_of(16), -1.0);
        let mut out = vec![0f32; xs.len()];
        // SAFETY: the CPU has AVX-512F (checked above).
        unsafe { lanes(&xs, &mut out) };
        for (x, got) in xs.iter().zip(&out) {
            let want = exp_approx(*x);
            assert_eq!(got.to_bits(), want.to_bits(), "e^{x}: {got} against {want}");
        }
    }
}
