//! The KV cache as one preallocated pool of fixed-size blocks.
//!
//! Which block belongs to which sequence is decided by the scheduler (braid-sched's block
//! allocator); this pool only stores the numbers. Preallocating means a full server never
//! allocates on the hot path and never runs out of memory mid-step: it runs out of blocks,
//! which the scheduler handles by preemption. The pool's pages are touched when it is made,
//! not left to the first write: zeroed memory is otherwise mapped lazily, so the process's
//! memory would grow under load (until every block had been used once) instead of at start,
//! and a machine without that memory would fail mid-step instead of at start.
//!
//! Layout `[layer][block][kv_head]`, then keys transposed (`[head_dim][slot]`) and values as
//! rows (`[slot][head_dim]`): attention scores 16 keys at a time with one vector per
//! dimension, and sums values one row at a time, without horizontal reductions.

use crate::config::ModelConfig;

pub struct KvPool {
    block_size: usize,
    num_blocks: usize,
    kv_heads: usize,
    head_dim: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

/// `len` zeros, with every page written once so that the memory is resident now.
fn touched(len: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; len];
    const FLOATS_PER_PAGE: usize = 4096 / std::mem::size_of::<f32>();
    for i in (0..len).step_by(FLOATS_PER_PAGE) {
        // Volatile: a plain store of 0.0 to zeroed memory may be optimized away.
        // SAFETY: i < len, inside the allocation.
        unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(i), 0.0) };
    }
    v
}

impl KvPool {
    /// `block_size` must be a multiple of 16 (attention scores 16 keys at a time).
    pub fn new(cfg: &ModelConfig, block_size: usize, num_blocks: usize) -> Self {
        assert!(
            block_size > 0 && block_size.is_multiple_of(16),
            "KV block size {block_size} is not a multiple of 16"
        );
        let len = cfg.num_layers * num_blocks * cfg.num_kv_heads * block_size * cfg.head_dim;
        Self {
            block_size,
            num_blocks,
            kv_heads: cfg.num_kv_heads,
            head_dim: cfg.head_dim,
            k: touched(len),
            v: touched(len),
        }
    }

    /// How many blocks of `block_size` tokens fit in `megabytes` for this model.
    pub fn blocks_for_budget(cfg: &ModelConfig, block_size: usize, megabytes: usize) -> usize {
        let bytes_per_block = cfg.kv_floats_per_token() * block_size * std::mem::size_of::<f32>();
        (megabytes * 1024 * 1024) / bytes_per_block
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    fn offset(&self, layer: usize, block: usize, head: usize) -> usize {
        ((layer * self.num_blocks + block) * self.kv_heads + head) * self.block_size * self.head_dim
    }

    /// Stores one token's keys and values (all KV heads, `kv_heads * head_dim` each) at `pos`.
    pub fn write(&mut self, layer: usize, block_table: &[u32], pos: usize, k: &[f32], v: &[f32]) {
        let block = block_table[pos / self.block_size] as usize;
        let slot = pos % self.block_size;
        let d = self.head_dim;
        let bs = self.block_size;
        for h in 0..self.kv_heads {
            let base = self.offset(layer, block, h);
            for (i, &x) in k[h * d..(h + 1) * d].iter().enumerate() {
                self.k[base + i * bs + slot] = x;
            }
            let at = base + slot * d;
            self.v[at..at + d].copy_from_slice(&v[h * d..(h + 1) * d]);
        }
    }

    /// Keys (`[head_dim][block_size]`) and values (`[block_size][head_dim]`) of one head in one block.
    pub fn block(&self, layer: usize, block: u32, head: usize) -> (&[f32], &[f32]) {
        let at = self.offset(layer, block as usize, head);
        let len = self.block_size * self.head_dim;
        (&self.k[at..at + len], &self.v[at..at + len])
    }
}
