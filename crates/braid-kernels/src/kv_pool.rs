//! The KV cache as one preallocated pool of fixed-size blocks.
//!
//! The pool lives beside attention because its layout is attention's: the model sizes it
//! ([`KvShape`]) and writes each step's keys and values; attention streams them back.
//!
//! Which block belongs to which sequence is decided by the scheduler (braid-sched's block
//! allocator); this pool only stores the numbers. Preallocating means a full server never
//! allocates on the hot path and never runs out of memory mid-step: it runs out of blocks,
//! which the scheduler handles by preemption. The pool's pages are touched when it is made,
//! not left to the first write: zeroed memory is otherwise mapped lazily, so the process's
//! memory would grow under load (until every block had been used once) instead of at start,
//! and a machine without that memory would fail mid-step instead of at start.
//!
//! Layout `[layer][kv_head][block]`, then keys transposed (`[head_dim][slot]`) and values as
//! rows (`[slot][head_dim]`): attention scores 16 keys at a time with one vector per
//! dimension, and sums values one row at a time, without horizontal reductions. A unit of
//! attention reads one head's blocks of one sequence in order, and a prompt's blocks are
//! allocated together with ascending ids, so that read is mostly one ascending stream the
//! hardware prefetchers follow (with the head inside the block, a head's consecutive blocks
//! were a few KB apart, each in a page of its own).
//!
//! Keys and values are stored as IEEE half floats by default (as llama.cpp and vLLM do): at long
//! contexts attention is bound by reading them, and half the bytes also means twice the
//! tokens in the same `--kv-cache-mb`. Attention widens them to f32 as it reads
//! ([`crate::Lanes`]); all arithmetic stays in f32.
//!
//! [`KvDtype::Q8_0`] halves the bytes again, in llama.cpp's `q8_0` format (what its
//! `--cache-type-k q8_0` stores): every 32 consecutive values of one token's head share a
//! half-float scale, each value an int8 of it. Sixteen sequences at 4,096 tokens read 1.5 GB
//! of half floats every step, which on a 2-core VM is most of a step's time; int8 reads half
//! that. The values are rounded once, when written, so attention's arithmetic still has one
//! answer per row whatever the tiling. Keys are stored in quads of dimensions
//! ([`q8_key_index`]), which rows computed in f32 score with int8 dot products
//! (`attention_q8`); values, and a prompt's bf16 rows' keys, are widened to f32.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

/// The dimensions of a model's KV cache: what the pool needs to know of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    pub num_layers: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

impl KvShape {
    /// Keys and values of one token, every layer: what one more token of context costs.
    pub fn floats_per_token(&self) -> usize {
        2 * self.num_layers * self.num_kv_heads * self.head_dim
    }

    /// Bytes of the keys and values of `tokens` tokens, every layer, stored as `dtype`: what a
    /// pool block holds, or what a decoding step reads of one sequence's context.
    pub fn bytes(&self, tokens: usize, dtype: KvDtype) -> usize {
        2 * self.num_layers * self.num_kv_heads * dtype.bytes(tokens * self.head_dim)
    }
}

/// How the pool stores each cached key and value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvDtype {
    /// IEEE half floats.
    #[default]
    F16,
    /// int8 with one half-float scale per 32 values of a token's head (llama.cpp's `q8_0`).
    Q8_0,
}

/// Values that share one scale in [`KvDtype::Q8_0`].
pub const Q8_GROUP: usize = 32;

impl KvDtype {
    /// The name `--kv-cache-dtype` takes.
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F16 => "f16",
            KvDtype::Q8_0 => "q8_0",
        }
    }

    /// Bytes of `elements` cached values of one head (a multiple of [`Q8_GROUP`] for q8_0).
    pub fn bytes(self, elements: usize) -> usize {
        match self {
            KvDtype::F16 => 2 * elements,
            KvDtype::Q8_0 => elements + 2 * (elements / Q8_GROUP),
        }
    }

    /// Why a model whose heads have `head_dim` values cannot be cached this way, if it cannot.
    pub fn unsupported_for(self, head_dim: usize) -> Option<String> {
        match self {
            KvDtype::Q8_0 if !head_dim.is_multiple_of(Q8_GROUP) => Some(format!(
                "the q8_0 KV cache scales {Q8_GROUP} values at a time, and this model's \
                 attention heads have {head_dim}"
            )),
            _ => None,
        }
    }
}

impl std::fmt::Display for KvDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

pub struct KvPool {
    num_layers: usize,
    block_size: usize,
    num_blocks: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: KvDtype,
    /// `u16`s of one (layer, head, block)'s keys, and as many of its values.
    region: usize,
    k: Vec<u16>,
    v: Vec<u16>,
}

/// One (layer, head, block)'s keys or values, as the pool stores them. Keys are
/// `[head_dim][slot]` and values `[slot][head_dim]`; a q8_0 block's scales follow the same
/// order with one entry per [`Q8_GROUP`] of a slot's values (`[group][slot]` for keys,
/// `[slot][group]` for values). q8_0 keys are `[head_dim / 4][slot][4]` instead
/// ([`q8_key_index`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KvBlock<'a> {
    F16(&'a [u16]),
    Q8_0 { quants: &'a [i8], scales: &'a [u16] },
}

impl<'a> KvBlock<'a> {
    fn of(dtype: KvDtype, region: &'a [u16], elements: usize) -> Self {
        match dtype {
            KvDtype::F16 => KvBlock::F16(&region[..elements]),
            KvDtype::Q8_0 => {
                let (quants, scales) = region.split_at(elements / 2);
                // SAFETY: `elements / 2` u16s are `elements` bytes, read as i8 (any bits are
                // a valid i8, and i8 needs no alignment).
                let quants =
                    unsafe { std::slice::from_raw_parts(quants.as_ptr() as *const i8, elements) };
                KvBlock::Q8_0 {
                    quants,
                    scales: &scales[..elements / Q8_GROUP],
                }
            }
        }
    }

    /// Values the block holds (`block_size × head_dim`).
    pub fn values(&self) -> usize {
        match self {
            KvBlock::F16(h) => h.len(),
            KvBlock::Q8_0 { quants, .. } => quants.len(),
        }
    }

    /// The memory the block occupies, to prefetch.
    pub fn bytes(&self) -> (*const u8, usize) {
        match self {
            KvBlock::F16(h) => (h.as_ptr() as *const u8, 2 * h.len()),
            KvBlock::Q8_0 { quants, scales } => (
                quants.as_ptr() as *const u8,
                quants.len() + 2 * scales.len(),
            ),
        }
    }
}

/// `len` zeros, with every page written once so that the memory is resident now.
fn touched(len: usize) -> Vec<u16> {
    let mut v = vec![0u16; len];
    const ELEMENTS_PER_PAGE: usize = 4096 / std::mem::size_of::<u16>();
    for i in (0..len).step_by(ELEMENTS_PER_PAGE) {
        // Volatile: a plain store of 0 to zeroed memory may be optimized away.
        // SAFETY: i < len, inside the allocation.
        unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(i), 0) };
    }
    v
}

/// The f32 value of half-float bits, exactly, for every finite half (the cache holds no
/// infinities or NaNs). Branch-free integer and multiply steps, so loops over it vectorize:
/// the exponent and mantissa are moved into place and rebiased by multiplying by 2^112,
/// which also turns half subnormals into the right f32.
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    let h = bits as u32;
    let magnitude = f32::from_bits((h & 0x7fff) << 13) * f32::from_bits(0x7780_0000);
    f32::from_bits(magnitude.to_bits() | ((h & 0x8000) << 16))
}

impl KvPool {
    /// A pool of half floats. `block_size` must be a multiple of 16 (attention scores 16 keys
    /// at a time).
    pub fn new(shape: impl Into<KvShape>, block_size: usize, num_blocks: usize) -> Self {
        Self::with_dtype(shape, block_size, num_blocks, KvDtype::F16)
    }

    /// A pool storing `dtype`, which must support the model's heads
    /// ([`KvDtype::unsupported_for`]).
    pub fn with_dtype(
        shape: impl Into<KvShape>,
        block_size: usize,
        num_blocks: usize,
        dtype: KvDtype,
    ) -> Self {
        let cfg = shape.into();
        assert!(
            block_size > 0 && block_size.is_multiple_of(16),
            "KV block size {block_size} is not a multiple of 16"
        );
        if let Some(why) = dtype.unsupported_for(cfg.head_dim) {
            panic!("{why}");
        }
        let region = dtype.bytes(block_size * cfg.head_dim).div_ceil(2);
        let len = cfg.num_layers * num_blocks * cfg.num_kv_heads * region;
        Self {
            num_layers: cfg.num_layers,
            block_size,
            num_blocks,
            kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            dtype,
            region,
            k: touched(len),
            v: touched(len),
        }
    }

    /// How many blocks of `block_size` tokens fit in `megabytes` for this model.
    pub fn blocks_for_budget(
        shape: impl Into<KvShape>,
        block_size: usize,
        megabytes: usize,
        dtype: KvDtype,
    ) -> usize {
        Self::blocks_for_shared_budget(&[shape.into()], block_size, megabytes, dtype)
    }

    /// How many blocks of `block_size` tokens fit in `megabytes` when each block is held in
    /// a pool per shape (a model and its draft model share one block table).
    pub fn blocks_for_shared_budget(
        shapes: &[KvShape],
        block_size: usize,
        megabytes: usize,
        dtype: KvDtype,
    ) -> usize {
        let bytes: usize = shapes.iter().map(|s| s.bytes(block_size, dtype)).sum();
        (megabytes * 1024 * 1024) / bytes.max(1)
    }

    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    fn offset(&self, layer: usize, block: usize, head: usize) -> usize {
        ((layer * self.kv_heads + head) * self.num_blocks + block) * self.region
    }

    /// Stores one token's keys and values (all KV heads, `kv_heads * head_dim` each) at `pos`.
    #[inline(always)]
    pub fn write(&mut self, layer: usize, block_table: &[u32], pos: usize, k: &[f32], v: &[f32]) {
        let block = block_table[pos / self.block_size] as usize;
        let slot = pos % self.block_size;
        let d = self.head_dim;
        let bs = self.block_size;
        for h in 0..self.kv_heads {
            let base = self.offset(layer, block, h);
            let (k, v) = (&k[h * d..(h + 1) * d], &v[h * d..(h + 1) * d]);
            let keys = &mut self.k[base..base + self.region];
            let values = &mut self.v[base..base + self.region];
            match self.dtype {
                // A slice at a time: `half` then checks the CPU's features once per slice and
                // converts 8 or 16 floats per instruction, where `f16::from_f32` checked them
                // for every value and converted one at a time (a third of a 4,096-token
                // prompt's time went to this serial loop).
                KvDtype::F16 => {
                    for (c, k) in k.chunks(64).enumerate() {
                        let mut halves = [f16::ZERO; 64];
                        halves[..k.len()].convert_from_f32_slice(k);
                        for (i, x) in halves[..k.len()].iter().enumerate() {
                            keys[(c * 64 + i) * bs + slot] = x.to_bits();
                        }
                    }
                    values[slot * d..][..d]
                        .reinterpret_cast_mut::<f16>()
                        .convert_from_f32_slice(v);
                }
                KvDtype::Q8_0 => {
                    let groups = d / Q8_GROUP;
                    let (kq, ks) = q8_parts_mut(keys, bs * d);
                    for (g, x) in k.chunks_exact(Q8_GROUP).enumerate() {
                        let (scale, q) = quantize_q8_0(x);
                        ks[g * bs + slot] = scale;
                        for (i, q) in q.into_iter().enumerate() {
                            kq[q8_key_index(g * Q8_GROUP + i, slot, bs)] = q;
                        }
                    }
                    let (vq, vs) = q8_parts_mut(values, bs * d);
                    for (g, x) in v.chunks_exact(Q8_GROUP).enumerate() {
                        let (scale, q) = quantize_q8_0(x);
                        vs[slot * groups + g] = scale;
                        vq[slot * d + g * Q8_GROUP..][..Q8_GROUP].copy_from_slice(&q);
                    }
                }
            }
        }
    }

    /// Copies block `src`'s keys and values, every layer and head, into block `dst`.
    pub fn copy_block(&mut self, src: u32, dst: u32) {
        let len = self.region;
        for layer in 0..self.num_layers {
            for head in 0..self.kv_heads {
                let from = self.offset(layer, src as usize, head);
                let to = self.offset(layer, dst as usize, head);
                self.k.copy_within(from..from + len, to);
                self.v.copy_within(from..from + len, to);
            }
        }
    }

    /// Keys and values of one head in one block.
    pub fn block(&self, layer: usize, block: u32, head: usize) -> (KvBlock<'_>, KvBlock<'_>) {
        let at = self.offset(layer, block as usize, head);
        let elements = self.block_size * self.head_dim;
        (
            KvBlock::of(self.dtype, &self.k[at..at + self.region], elements),
            KvBlock::of(self.dtype, &self.v[at..at + self.region], elements),
        )
    }
}

/// Where dimension `dim` of slot `slot`'s key sits among a q8_0 block's quants: keys come in
/// quads of consecutive dimensions, `[head_dim / 4][slot][4]`. Attention scores them with int8
/// dot products against an int8 query (`vpdpbusd` and its kin multiply-add four consecutive
/// bytes into each 32-bit lane), so one 64-byte vector holds four dimensions of 16 keys, one
/// key per lane.
#[inline(always)]
pub fn q8_key_index(dim: usize, slot: usize, block_size: usize) -> usize {
    ((dim / 4) * block_size + slot) * 4 + dim % 4
}

/// A q8_0 region's quants (`elements` bytes) and scales (the `u16`s after them).
fn q8_parts_mut(region: &mut [u16], elements: usize) -> (&mut [i8], &mut [u16]) {
    let (quants, scales) = region.split_at_mut(elements / 2);
    // SAFETY: `elements / 2` u16s are `elements` bytes, written as i8 (which needs no
    // alignment); the two halves do not overlap.
    let quants =
        unsafe { std::slice::from_raw_parts_mut(quants.as_mut_ptr() as *mut i8, elements) };
    (quants, scales)
}

/// ggml's `quantize_row_q8_0` for one group: the scale is the largest magnitude over 127,
/// stored as a half float; each value is rounded (half away from zero) at the unrounded scale.
pub fn quantize_q8_0(x: &[f32]) -> (u16, [i8; Q8_GROUP]) {
    let amax = x.iter().fold(0f32, |m, &x| m.max(x.abs()));
    let d = amax / 127.0;
    let inv = if d != 0.0 { 1.0 / d } else { 0.0 };
    let q = std::array::from_fn(|i| (x[i] * inv).round() as i8);
    (f16::from_f32(d).to_bits(), q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_block_holds_the_source_s_keys_and_values_in_every_layer() {
        for dtype in [KvDtype::F16, KvDtype::Q8_0] {
            copies_a_block(dtype);
        }
    }

    fn copies_a_block(dtype: KvDtype) {
        let cfg = KvShape {
            num_layers: 2,
            num_kv_heads: 2,
            head_dim: 32,
        };
        let mut pool = KvPool::with_dtype(cfg, 16, 4, dtype);
        let floats = cfg.num_kv_heads * cfg.head_dim;
        for layer in 0..cfg.num_layers {
            for pos in 0..5 {
                let k: Vec<f32> = (0..floats)
                    .map(|i| (layer * 100 + pos * 10 + i) as f32)
                    .collect();
                let v: Vec<f32> = k.iter().map(|x| -x).collect();
                pool.write(layer, &[2], pos, &k, &v);
            }
        }
        pool.copy_block(2, 1);
        for layer in 0..cfg.num_layers {
            for head in 0..cfg.num_kv_heads {
                assert_eq!(pool.block(layer, 1, head), pool.block(layer, 2, head));
                assert_ne!(pool.block(layer, 0, head), pool.block(layer, 2, head));
            }
        }
    }

    /// Each token's head is stored as ggml's q8_0 blocks: a half-float scale of the group's
    /// largest magnitude over 127, and every value rounded to the nearest multiple of it.
    #[test]
    fn q8_0_stores_each_group_of_32_at_its_own_scale() {
        let cfg = KvShape {
            num_layers: 1,
            num_kv_heads: 2,
            head_dim: 64,
        };
        let (bs, slot) = (16, 5);
        let mut pool = KvPool::with_dtype(cfg, bs, 3, KvDtype::Q8_0);
        // Groups of very different size, and one of zeros.
        let k: Vec<f32> = (0..128)
            .map(|i| match i / 32 {
                0 => (i as f32 * 0.37).sin() * 40.0,
                1 => (i as f32 * 0.11).cos() * 0.01,
                2 => 0.0,
                _ => i as f32 - 100.0,
            })
            .collect();
        let v: Vec<f32> = k.iter().rev().map(|x| x * -3.0).collect();
        pool.write(0, &[2, 1], bs + slot, &k, &v);
        for head in 0..2 {
            let (
                KvBlock::Q8_0 {
                    quants: kq,
                    scales: ks,
                },
                KvBlock::Q8_0 {
                    quants: vq,
                    scales: vs,
                },
            ) = pool.block(0, 1, head)
            else {
                panic!("a q8_0 pool gives q8_0 blocks");
            };
            for i in 0..64 {
                let g = i / Q8_GROUP;
                let (kx, vx) = (k[head * 64 + i], v[head * 64 + i]);
                let key = kq[q8_key_index(i, slot, bs)] as f32 * f16_to_f32(ks[g * bs + slot]);
                let value = vq[slot * 64 + i] as f32 * f16_to_f32(vs[slot * 2 + g]);
                let group = |x: &[f32]| {
                    x[head * 64 + g * 32..][..32]
                        .iter()
                        .fold(0f32, |m, x| m.max(x.abs()))
                };
                // Half a step of the scale, and the scale's own half-float rounding.
                let (kstep, vstep) = (group(&k) / 127.0, group(&v) / 127.0);
                assert!(
                    (key - kx).abs() <= kstep * 0.5 + kx.abs() / 1024.0,
                    "key {i}: {key} vs {kx}"
                );
                assert!(
                    (value - vx).abs() <= vstep * 0.5 + vx.abs() / 1024.0,
                    "value {i}: {value} vs {vx}"
                );
            }
        }
        assert_eq!(quantize_q8_0(&[0.0; 32]), (0, [0; 32]));
        let (scale, q) = quantize_q8_0(&std::array::from_fn::<f32, 32, _>(|i| i as f32 - 16.0));
        assert_eq!(scale, f16::from_f32(16.0 / 127.0).to_bits());
        assert_eq!((q[0], q[16], q[31]), (-127, 0, 119));
    }

    /// q8_0 holds 1.88× the tokens of f16 in the same memory (34 bytes per 32 values against 64).
    #[test]
    fn q8_0_fits_about_twice_the_tokens_in_a_budget() {
        let default_model = KvShape {
            num_layers: 30,
            num_kv_heads: 3,
            head_dim: 64,
        };
        let f16 = KvPool::blocks_for_budget(default_model, 16, 1024, KvDtype::F16);
        let q8 = KvPool::blocks_for_budget(default_model, 16, 1024, KvDtype::Q8_0);
        assert_eq!((f16, q8), (2912, 5482));
        assert!(KvDtype::Q8_0.unsupported_for(16).unwrap().contains("16"));
        assert_eq!(KvDtype::Q8_0.unsupported_for(256), None);
    }

    #[test]
    fn every_finite_half_widens_exactly() {
        // Every 37th under Miri, which takes minutes over all of them.
        let finite: Vec<u16> = (0..=u16::MAX)
            .filter(|&b| f16::from_bits(b).is_finite())
            .step_by(if cfg!(miri) { 37 } else { 1 })
            .collect();
        for &bits in &finite {
            let want = f16::from_bits(bits).to_f32().to_bits();
            assert_eq!(f16_to_f32(bits).to_bits(), want, "{bits:#06x}");
        }
    }
}
