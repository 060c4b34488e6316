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
//! Keys and values are stored as IEEE half floats (as llama.cpp and vLLM do by default): at long
//! contexts attention is bound by reading them, and half the bytes also means twice the
//! tokens in the same `--kv-cache-mb`. Attention widens them to f32 as it reads
//! ([`crate::Lanes`]); all arithmetic stays in f32.

use half::f16;

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
}

/// Bytes one cached key or value element takes.
pub const BYTES_PER_ELEMENT: usize = std::mem::size_of::<u16>();

pub struct KvPool {
    num_layers: usize,
    block_size: usize,
    num_blocks: usize,
    kv_heads: usize,
    head_dim: usize,
    k: Vec<u16>,
    v: Vec<u16>,
}

/// `len` zeros, with every page written once so that the memory is resident now.
fn touched(len: usize) -> Vec<u16> {
    let mut v = vec![0u16; len];
    const ELEMENTS_PER_PAGE: usize = 4096 / BYTES_PER_ELEMENT;
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
    /// `block_size` must be a multiple of 16 (attention scores 16 keys at a time).
    pub fn new(shape: impl Into<KvShape>, block_size: usize, num_blocks: usize) -> Self {
        let cfg = shape.into();
        assert!(
            block_size > 0 && block_size.is_multiple_of(16),
            "KV block size {block_size} is not a multiple of 16"
        );
        let len = cfg.num_layers * num_blocks * cfg.num_kv_heads * block_size * cfg.head_dim;
        Self {
            num_layers: cfg.num_layers,
            block_size,
            num_blocks,
            kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            k: touched(len),
            v: touched(len),
        }
    }

    /// How many blocks of `block_size` tokens fit in `megabytes` for this model.
    pub fn blocks_for_budget(
        shape: impl Into<KvShape>,
        block_size: usize,
        megabytes: usize,
    ) -> usize {
        Self::blocks_for_shared_budget(&[shape.into()], block_size, megabytes)
    }

    /// How many blocks of `block_size` tokens fit in `megabytes` when each block is held in
    /// a pool per shape (a model and its draft model share one block table).
    pub fn blocks_for_shared_budget(
        shapes: &[KvShape],
        block_size: usize,
        megabytes: usize,
    ) -> usize {
        let floats: usize = shapes.iter().map(KvShape::floats_per_token).sum();
        (megabytes * 1024 * 1024) / (floats * block_size * BYTES_PER_ELEMENT).max(1)
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    fn offset(&self, layer: usize, block: usize, head: usize) -> usize {
        ((layer * self.kv_heads + head) * self.num_blocks + block) * self.block_size * self.head_dim
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
            for (i, &x) in k[h * d..(h + 1) * d].iter().enumerate() {
                self.k[base + i * bs + slot] = f16::from_f32(x).to_bits();
            }
            let at = base + slot * d;
            for (dst, &x) in self.v[at..at + d].iter_mut().zip(&v[h * d..(h + 1) * d]) {
                *dst = f16::from_f32(x).to_bits();
            }
        }
    }

    /// Copies block `src`'s keys and values, every layer and head, into block `dst`.
    pub fn copy_block(&mut self, src: u32, dst: u32) {
        let len = self.block_size * self.head_dim;
        for layer in 0..self.num_layers {
            for head in 0..self.kv_heads {
                let from = self.offset(layer, src as usize, head);
                let to = self.offset(layer, dst as usize, head);
                self.k.copy_within(from..from + len, to);
                self.v.copy_within(from..from + len, to);
            }
        }
    }

    /// Keys (`[head_dim][block_size]`) and values (`[block_size][head_dim]`) of one head in one
    /// block, as half-float bits.
    pub fn block(&self, layer: usize, block: u32, head: usize) -> (&[u16], &[u16]) {
        let at = self.offset(layer, block as usize, head);
        let len = self.block_size * self.head_dim;
        (&self.k[at..at + len], &self.v[at..at + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_block_holds_the_source_s_keys_and_values_in_every_layer() {
        let cfg = KvShape {
            num_layers: 2,
            num_kv_heads: 2,
            head_dim: 16,
        };
        let mut pool = KvPool::new(cfg, 16, 4);
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
