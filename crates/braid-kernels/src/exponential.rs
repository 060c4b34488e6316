//! The exponential of the softmax, the embedding model's GELU and the model's gates:
//! Cephes' `expf` for `x <= 0`, written as scalar code that the compiler vectorizes on every
//! instruction set. A prompt's bf16 softmax weights keep 8 significant bits, so they take a
//! cheaper power of two ([`exp2_for_bf16`]), half the operations of a pass that took a tenth
//! of a 4,096-token prompt's time in a profile on Zen 4. It is written once more in AVX-512
//! intrinsics for the loop that must run inside an AVX-512 BF16 entry point
//! ([`crate::attention_bf16_native`]), as the same sequence of IEEE operations, so the two
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

/// `1.5·2^23`: adding it to a float of magnitude below 2^22 rounds that float to a whole
/// number (to even on ties), held in the sum's low mantissa bits.
const WHOLE: f32 = 12_582_912.0;

/// `2^n` for a whole number `n` in [-126, 127], from the bits of `n + WHOLE`: no float-to-int
/// cast, which saturates and maps NaN to 0, checks the compiler made one lane at a time.
#[inline(always)]
fn power_of_two(n: f32) -> f32 {
    let biased = (n + WHOLE)
        .to_bits()
        .wrapping_sub(WHOLE.to_bits())
        .wrapping_add(127);
    f32::from_bits(biased << 23)
}

/// The least power of two [`exp2_for_bf16`] takes: the smallest normal float's.
const LOWEST_POWER: f32 = -126.0;
/// A polynomial for `2^f` on [-1/2, 1/2], constant term first, to a relative 7.5e-5: the
/// fitted one of least largest relative error (over 20,001 points, the coefficients as
/// floats). A bf16 value's unit in the last place is 2^-7 of it, 100 times that error.
const POWER_COEFFICIENTS: [f32; 4] = [0.999_928_2, 0.693_261, 0.242_610_23, 0.055_171_21];

/// `2^t` for `t` in [-126, 0] (clamped there; NaN stays NaN) to a relative 7.5e-5, for values
/// that are then rounded to bf16: `t = n + f`, `n` whole and `|f| <= 1/2`, a degree-3
/// polynomial in `f` times `2^n`.
#[inline(always)]
pub fn exp2_for_bf16(t: f32) -> f32 {
    // Comparisons, not `clamp`'s order of `max` and `min`, to say what NaN does.
    let t = if t < LOWEST_POWER { LOWEST_POWER } else { t };
    let t = if t > 0.0 { 0.0 } else { t };
    let n = (t + WHOLE) - WHOLE;
    let f = t - n;
    let [c0, c1, c2, c3] = POWER_COEFFICIENTS;
    let p = c3.mul_add(f, c2).mul_add(f, c1).mul_add(f, c0);
    p * power_of_two(n)
}

/// [`exp2_for_bf16`] of 16 lanes: `vrndscaleps` rounds to nearest even as adding and
/// subtracting [`WHOLE`] does, and `vscalefps` rounds `p · 2^n` once, as the product with
/// `2^n`'s float does.
///
/// # Safety
///
/// The CPU must have AVX-512F, and the caller must be compiled with it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn exp2_for_bf16_512(t: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // `max` and `min` return their second operand when either is NaN.
    let t = _mm512_max_ps(_mm512_set1_ps(LOWEST_POWER), t);
    let t = _mm512_min_ps(_mm512_setzero_ps(), t);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let f = _mm512_sub_ps(t, n);
    let [c0, c1, c2, c3] = POWER_COEFFICIENTS;
    let p = _mm512_fmadd_ps(f, _mm512_set1_ps(c3), _mm512_set1_ps(c2));
    let p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c1));
    let p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c0));
    _mm512_scalef_ps(p, n)
}

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
    // `n` is a whole number in [-126, 0].
    e * power_of_two(n)
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

    #[test]
    fn exp2_for_bf16_is_within_its_bound() {
        for i in 0..=1_260_000 {
            let t = -126.0 * i as f32 / 1_260_000.0;
            let (got, want) = (exp2_for_bf16(t) as f64, (t as f64).exp2());
            assert!(
                ((got - want) / want).abs() < 7.6e-5,
                "2^{t}: {got} vs {want}"
            );
        }
        assert_eq!(exp2_for_bf16(-1000.0), exp2_for_bf16(-126.0));
        assert_eq!(exp2_for_bf16(5.0), exp2_for_bf16(0.0));
        assert!(exp2_for_bf16(f32::NAN).is_nan());
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
    fn the_avx512_power_of_two_gives_the_scalar_bits() {
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
                    let t = exp2_for_bf16_512(_mm512_loadu_ps(x.as_ptr()));
                    _mm512_storeu_ps(o.as_mut_ptr(), t)
                };
            }
        }
        // The softmax's arguments times log2(e), and every half-integer's neighbours (ties).
        let mut xs: Vec<f32> = arguments()
            .iter()
            .map(|x| x * std::f32::consts::LOG2_E)
            .collect();
        for h in -260..=4 {
            let x = h as f32 / 2.0;
            xs.extend([
                x,
                f32::from_bits(x.to_bits().wrapping_add(1)),
                f32::from_bits(x.to_bits().wrapping_sub(1)),
            ]);
        }
        xs.resize(xs.len().next_multiple_of(16), -1.0);
        let mut out = vec![0f32; xs.len()];
        // SAFETY: the CPU has AVX-512F (checked above).
        unsafe { lanes(&xs, &mut out) };
        for (x, got) in xs.iter().zip(&out) {
            let want = exp2_for_bf16(*x);
            assert_eq!(got.to_bits(), want.to_bits(), "2^{x}: {got} against {want}");
        }
    }
}
