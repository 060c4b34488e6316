//! Cached keys and values as attention reads them: f32, from the pool's half floats or q8_0
//! int8 and scales. A value widens to the same bits wherever it is read (in place by a few
//! readers, or once into a scratch block for many), which is what keeps a row's attention
//! independent of the tile it is computed in.

use crate::attention_tiles::LANES;
use crate::kv_pool::Q8_GROUP;
use crate::{f16_to_f32, KvBlock, Lanes};

/// `dst` = `src` widened to f32.
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
unsafe fn widen_halves<L: Lanes>(src: &[u16], dst: &mut [f32]) {
    for (d16, s16) in dst.chunks_exact_mut(LANES).zip(src.chunks_exact(LANES)) {
        // SAFETY: our caller vouches for `L`'s features.
        let wide = unsafe { L::widen16(s16.try_into().expect("16 halves")) };
        d16.copy_from_slice(&wide);
    }
}

/// The 16 int8 at `quants`, each times the f32 at the same place of `scales`: a q8_0 value as
/// every reader sees it, widened once or in place.
///
/// # Safety
///
/// `quants` must be valid for reads of 16 bytes and `scales` of 16 floats, and the CPU must
/// have `L`'s features.
#[inline(always)]
pub(crate) unsafe fn dequantize16<L: Lanes>(quants: *const i8, scales: *const f32) -> [f32; LANES] {
    // SAFETY: our caller's promise.
    unsafe {
        L::dequantize16(
            &*(quants as *const [i8; LANES]),
            &*(scales as *const [f32; LANES]),
        )
    }
}

/// The scales of q8_0 `keys` as f32, `[block][group]` of 16 slots each, into `dst`.
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
pub(crate) unsafe fn widened_key_scales<L: Lanes>(keys: &[KvBlock], bs: usize, dst: &mut Vec<f32>) {
    dst.clear();
    for k in keys {
        if let KvBlock::Q8_0 { scales, .. } = k {
            for g in scales.chunks_exact(bs) {
                // SAFETY: our caller vouches for `L`'s features.
                let wide = unsafe { L::widen16(g[..LANES].try_into().expect("16 scales")) };
                dst.extend_from_slice(&wide);
            }
        }
    }
}

/// `dst` = a block's keys (`[head_dim][slot]`, `bs` slots) as f32: for q8_0 each int8 times
/// its slot's scale for the dimension's group, the one product every reader then sees.
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
pub(crate) unsafe fn widen_keys<L: Lanes>(keys: KvBlock, bs: usize, dst: &mut [f32]) {
    match keys {
        // SAFETY: our caller vouches for `L`'s features.
        KvBlock::F16(h) => unsafe { widen_halves::<L>(h, dst) },
        KvBlock::Q8_0 { quants, scales } => {
            for (g, scales) in scales.chunks_exact(bs).enumerate() {
                for s0 in (0..bs).step_by(LANES) {
                    // SAFETY: our caller vouches for `L`'s features.
                    let scale = unsafe {
                        L::widen16(scales[s0..s0 + LANES].try_into().expect("16 scales"))
                    };
                    for dim in g * Q8_GROUP..(g + 1) * Q8_GROUP {
                        let at = dim * bs + s0;
                        // SAFETY: `at + 16 <= bs * head_dim`, the quants' length.
                        let wide =
                            unsafe { dequantize16::<L>(quants[at..].as_ptr(), scale.as_ptr()) };
                        dst[at..at + LANES].copy_from_slice(&wide);
                    }
                }
            }
        }
    }
}

/// `dst` = a block's values (`[slot][head_dim]`, scales `[slot][group]`) as f32, like
/// [`widen_keys`].
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
pub(crate) unsafe fn widen_values<L: Lanes>(values: KvBlock, dst: &mut [f32]) {
    match values {
        // SAFETY: our caller vouches for `L`'s features.
        KvBlock::F16(h) => unsafe { widen_halves::<L>(h, dst) },
        KvBlock::Q8_0 { quants, scales } => {
            debug_assert_eq!(scales.len(), quants.len() / Q8_GROUP);
            for (i, (o, q)) in dst
                .chunks_exact_mut(Q8_GROUP)
                .zip(quants.chunks_exact(Q8_GROUP))
                .enumerate()
            {
                let s = f16_to_f32(scales[i]);
                for (o, &q) in o.iter_mut().zip(q) {
                    *o = q as f32 * s;
                }
            }
        }
    }
}
