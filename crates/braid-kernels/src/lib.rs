//! braid's arithmetic: weight formats times instruction sets, chosen once when the process
//! starts, and attention over the paged KV pool.
//!
//! One binary runs on any x86-64-v2 or aarch64 CPU, so nothing fast may depend on how it was
//! compiled: every hot loop exists once per instruction set, each copy compiled with that set's
//! target features, and [`active`] picks the copy when the process starts
//! ([`selection`]). What differs between instruction sets is one row each of the kernel table
//! ([`kernel_table`]), as in ggml's CPU type traits.
//!
//! A weight format is a file that packs tiles of 16 output rows × 32 K values and holds the
//! portable reference: int8 blocks ([`int8`], any GGUF type requantized), 4-bit blocks
//! ([`int4`], Q4_0, Q4_1 and Q4_K) and 5-bit blocks ([`int5`], Q5_0, Q5_1 and Q5_K: the 4-bit
//! tile plus a plane of fifth bits). An instruction set is a file (`amx.rs`, `avx512.rs`,
//! `avx2.rs`, `neon.rs`) with one weight-stationary loop over tiles and rows (its panels laid
//! out by `panels.rs`), and one block function per format that says how a tile of that format
//! meets the rows. Float loops that the compiler vectorizes (attention, the softmax's exponential,
//! the model's row loops) are written once, generic over [`Lanes`], and compiled per
//! instruction set by one `#[target_feature]` entry point each ([`FloatIsa`]).
//!
//! Every path produces the same bits: integer dot products are exact whatever their order,
//! and the float arithmetic after them (and in attention) is the same sequence of IEEE
//! operations on every path, with fused multiply-adds where the source says `mul_add`. The
//! tests compare each path the CPU has to the portable one bit for bit.

mod activation_quantizer;
#[cfg(target_arch = "x86_64")]
pub mod amx;
pub mod attention;
mod attention_bf16;
#[cfg(target_arch = "x86_64")]
mod attention_bf16_native;
mod attention_q8;
mod attention_tiles;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod awake_threads;
pub mod bf16;
pub mod exponential;
mod f16_lanes;
#[cfg(test)]
mod format_checks;
mod format_tile;
pub mod int4;
pub mod int5;
pub mod int8;
pub mod int8_peak;
mod kernel_ops;
pub mod kernel_table;
mod kv_pool;
mod kv_widen;
pub mod memory_peak;
#[cfg(target_arch = "aarch64")]
mod neon;
mod packed_weight;
mod panels;
pub mod parallel_rows;
mod peak_loops;
mod quantized_rows;
pub mod selection;
mod send_ptr;

pub use awake_threads::run as run_step;
pub use f16_lanes::{FloatIsa, FloatLoops, Lanes, PortableLanes};
pub use int4::{Int4Source, Int4Weight};
pub use int5::{Int5Source, Int5Weight};
pub use int8::{Int8Source, Int8Weight};
pub use kernel_table::Kernel;
pub use kv_pool::{f16_to_f32, quantize_q8_0, KvBlock, KvDtype, KvPool, KvShape, Q8_GROUP};
pub use packed_weight::{matmul, matmul_reference, matmul_with, PackedWeight};
pub use quantized_rows::QuantizedRows;
pub(crate) use selection::cpu_has;
pub use selection::{active, cpu_features, forced_by_env, select, select_from_env, KernelError};
pub use send_ptr::SendPtr;

/// Values per quantization block along K, in every weight format.
pub const BLOCK: usize = 32;
/// Output rows per packed tile, in every weight format.
pub const TILE_N: usize = 16;
