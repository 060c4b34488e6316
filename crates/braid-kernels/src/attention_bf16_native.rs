//! A prompt's bf16 attention operands made with AVX-512 BF16's own conversion, for
//! `vdpbf16ps`. Rounded one float at a time in portable code (a dozen vector operations for
//! NaN, subnormals and the tie), the softmax weights, keys and values of a 4,096-token prompt
//! took about 6% of its prefill on an AMD EPYC (Zen 4), and the exponential before them as
//! much again. `vcvtne2ps2bf16` rounds to nearest even, keeps NaN quiet and flushes subnormals
//! to signed zero, which is [`crate::attention_bf16::round`], so each function here gives the
//! bits of its portable twin in [`crate::attention_bf16`]; the tests there check it.

use crate::attention_tiles::{weight_blocks, LANES};
use crate::exponential::exp2_for_bf16_512;
use std::arch::x86_64::*;
use std::f32::consts::LOG2_E;

/// Word `2j` of a 32-word vector takes word `j`, word `2j + 1` word `16 + j`: the even row's
/// and the odd row's roundings, side by side in pairs.
const INTERLEAVE: [i16; 32] = {
    let mut idx = [0i16; 32];
    let mut j = 0;
    while j < 16 {
        idx[2 * j] = j as i16;
        idx[2 * j + 1] = 16 + j as i16;
        j += 1;
    }
    idx
};

/// The pairs of 16 floats from `even` and 16 from `odd`, each rounded to bf16, the even one in
/// the low half of each word.
#[inline(always)]
unsafe fn pairs16(even: __m512, odd: __m512) -> __m512i {
    // SAFETY: the caller runs inside an AVX-512 BF16 entry point.
    unsafe {
        let rounded: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(odd, even));
        _mm512_permutexvar_epi16(_mm512_loadu_si512(INTERLEAVE.as_ptr().cast()), rounded)
    }
}

/// [`crate::attention_bf16::weights`] for the instruction: the row's weights over
/// `first..end` go to `pairs` only.
///
/// # Safety
///
/// The CPU must have AVX-512 BF16; `scores` must hold `end` floats and `pairs` `end / 2`
/// words, where `end` is as [`weight_blocks`] gives.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
pub(crate) unsafe fn weights(
    scores: &[f32],
    lo: usize,
    seen: usize,
    max: f32,
    pairs: &mut [u32],
) -> f32 {
    let (first, end) = weight_blocks(lo, seen, scores.len());
    assert!(end <= scores.len() && end <= 2 * pairs.len() && first.is_multiple_of(LANES));
    let (x, out) = (scores.as_ptr(), pairs.as_mut_ptr());
    let (log2e, shift) = (_mm512_set1_ps(LOG2_E), _mm512_set1_ps(-(max * LOG2_E)));
    let mut lanes = _mm512_setzero_ps();
    for at in (first..end).step_by(LANES) {
        // The lanes of keys the row sees.
        let below = |n: usize| (1u32 << n.min(LANES)) - 1;
        let keep = (below(seen.saturating_sub(at)) & !below(lo.saturating_sub(at))) as u16;
        // SAFETY: `at + 16 <= end`, inside both buffers (asserted); the CPU has AVX-512 BF16
        // (our caller's promise).
        unsafe {
            let e = exp2_for_bf16_512(_mm512_fmadd_ps(_mm512_loadu_ps(x.add(at)), log2e, shift));
            let halves = _mm256_maskz_mov_epi16(
                keep,
                std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(e)),
            );
            _mm256_storeu_si256(out.add(at / 2).cast(), halves);
            lanes = _mm512_mask_add_ps(lanes, keep, lanes, e);
        }
    }
    let mut sums = [0f32; LANES];
    // SAFETY: 16 floats.
    unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), lanes) };
    sums.iter().sum()
}

/// [`crate::attention_bf16::round_keys`] for the instruction: widened key blocks
/// (`[block][dim][slot]`) into `pairs` (`[block][dim pair][slot]`).
///
/// # Safety
///
/// The CPU must have AVX-512 BF16; `wide` must hold whole pairs of 16-float rows, and `pairs`
/// half as many words.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
pub(crate) unsafe fn key_pairs(wide: &[f32], pairs: &mut [u32]) {
    assert!(wide.len().is_multiple_of(2 * LANES) && pairs.len() * 2 == wide.len());
    for (dst, rows) in pairs
        .chunks_exact_mut(LANES)
        .zip(wide.chunks_exact(2 * LANES))
    {
        // SAFETY: 32 floats in, 16 words out; AVX-512 BF16 (our caller's promise).
        unsafe {
            let (even, odd) = (
                _mm512_loadu_ps(rows.as_ptr()),
                _mm512_loadu_ps(rows.as_ptr().add(LANES)),
            );
            _mm512_storeu_si512(dst.as_mut_ptr().cast(), pairs16(even, odd));
        }
    }
}

/// [`crate::attention_bf16::round_values`] for the instruction: a widened value block
/// (`[slot][dim]`, 16 slots) into `pairs` (`[slot pair][dim]`), the slots from `written` on
/// as zeros.
///
/// # Safety
///
/// The CPU must have AVX-512 BF16; `d` must be a multiple of 16, `wide` hold 16 slots of `d`
/// floats and `pairs` 8 pairs of them.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
pub(crate) unsafe fn value_pairs(wide: &[f32], d: usize, written: usize, pairs: &mut [u32]) {
    assert!(d.is_multiple_of(LANES) && wide.len() == LANES * d && pairs.len() == LANES / 2 * d);
    let slot = |s: usize, c: usize| {
        if s < written {
            // SAFETY: slot `s < 16`, piece `c < d / 16` (asserted); AVX-512 (our caller's
            // promise).
            unsafe { _mm512_loadu_ps(wide.as_ptr().add(s * d + c * LANES)) }
        } else {
            _mm512_setzero_ps()
        }
    };
    for p in 0..LANES / 2 {
        for c in 0..d / LANES {
            // SAFETY: pair `p < 8`, piece `c < d / 16`: inside `pairs` (asserted).
            unsafe {
                let out = pairs.as_mut_ptr().add(p * d + c * LANES);
                _mm512_storeu_si512(out.cast(), pairs16(slot(2 * p, c), slot(2 * p + 1, c)));
            }
        }
    }
}
