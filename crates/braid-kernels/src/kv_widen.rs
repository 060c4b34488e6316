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

/// A q8_0 block's `scales` as f32, in their order, appended to `dst` 16 at a time (a block of
/// 16 slots has 16 per group): converted one by one, a block's values' scales were a
/// twentieth of a decoding step at 4k.
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
unsafe fn append_widened<L: Lanes>(scales: &[u16], dst: &mut Vec<f32>) {
    for sixteen in scales.chunks_exact(LANES) {
        // SAFETY: our caller vouches for `L`'s features.
        let wide = unsafe { L::widen16(sixteen.try_into().expect("16 scales")) };
        dst.extend_from_slice(&wide);
    }
}

/// A q8_0 block's `scales` as f32, in their order, into `dst`.
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
pub(crate) unsafe fn widened_scales<L: Lanes>(scales: &[u16], dst: &mut Vec<f32>) {
    dst.clear();
    // SAFETY: our caller vouches for `L`'s features.
    unsafe { append_widened::<L>(scales, dst) };
}

/// The scales of q8_0 `keys` (blocks of 16 slots) as f32, `[block][group]` of 16 slots each,
/// into `dst`.
///
/// # Safety
///
/// The CPU must have `L`'s features.
#[inline(always)]
pub(crate) unsafe fn widened_key_scales<L: Lanes>(keys: &[KvBlock], dst: &mut Vec<f32>) {
    dst.clear();
    for k in keys {
        if let KvBlock::Q8_0 { scales, .. } = k {
            // SAFETY: our caller vouches for `L`'s features.
            unsafe { append_widened::<L>(scales, dst) };
        }
    }
}

/// `dst` = a block's keys (`[head_dim][slot]`, `bs` slots) as f32: for q8_0 (stored in quads
/// of dimensions) each int8 times its slot's scale for the dimension's group, the one product
/// every reader then sees.
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
            // Quad by quad (`[head_dim / 4][slot][4]`), each int8 times its slot's scale for
            // the dimension's group.
            for (quad, quads) in quants.chunks_exact(4 * bs).enumerate() {
                let dim = 4 * quad;
                let scales = &scales[dim / Q8_GROUP * bs..][..bs];
                for (slot, (four, &scale)) in quads.chunks_exact(4).zip(scales).enumerate() {
                    let scale = f16_to_f32(scale);
                    for (i, &q) in four.iter().enumerate() {
                        dst[(dim + i) * bs + slot] = q as f32 * scale;
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
