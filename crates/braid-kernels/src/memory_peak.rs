//! How fast this machine reads memory, measured: what decode at a long context is compared
//! against.
//!
//! Every decoding row reads its sequence's whole KV cache once per step (23 KB of half floats
//! per cached token for the default model), so sixteen sequences at 4,096 tokens read 1.5 GB a
//! step. No attention kernel can read that faster than the memory delivers it: the share of
//! this rate that a step's KV reads reach says how much a faster attention could still gain,
//! and when only fewer bytes (a smaller cache type) can help. A VM's memory bandwidth is not
//! written anywhere it can see, and differs between machines of the same CPU model, so it is
//! read off the machine, like the int8 peak ([`crate::int8_peak`]).

use rayon::prelude::*;
use std::time::Instant;

/// Bytes read per pass: larger than any last-level cache seen (260 MB on a Xeon family 6
/// model 207), so that the pass streams from memory.
const BUFFER_BYTES: usize = 1 << 30;

/// Bytes each task sums: enough for the hardware prefetchers to run ahead on every thread.
const TASK_BYTES: usize = 1 << 20;

/// The memory's read rate in GB/s (10⁹ bytes per second), every rayon thread reading its part
/// of a buffer larger than the caches at once: the best of `passes` passes over it. Takes
/// about a second (the buffer is written once first, so that its pages are real memory).
pub fn memory_read_gbps(passes: usize) -> f64 {
    let words = BUFFER_BYTES / 8;
    let mut buffer = vec![0u64; words];
    buffer
        .par_chunks_mut(TASK_BYTES / 8)
        .enumerate()
        .for_each(|(i, chunk)| chunk.fill(i as u64));
    let mut best = 0f64;
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        let sum: u64 = buffer
            .par_chunks(TASK_BYTES / 8)
            .map(sum_words)
            .reduce(|| 0, u64::wrapping_add);
        let secs = t.elapsed().as_secs_f64();
        std::hint::black_box(sum);
        best = best.max(BUFFER_BYTES as f64 / secs / 1e9);
    }
    best
}

/// The wrapping sum of `words`, in eight independent lanes so that the compiler vectorizes
/// it: two 16-byte loads a cycle outrun any one core's share of the memory.
fn sum_words(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    for chunk in words.chunks_exact(8) {
        for (l, w) in lanes.iter_mut().zip(chunk) {
            *l = l.wrapping_add(*w);
        }
    }
    lanes.into_iter().fold(0, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_reads_every_word() {
        let words: Vec<u64> = (1..=64).collect();
        assert_eq!(sum_words(&words), 64 * 65 / 2);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads a buffer of 1 GiB")]
    fn the_rate_is_a_positive_finite_number() {
        let gbps = memory_read_gbps(1);
        assert!(gbps.is_finite() && gbps > 0.0, "{gbps}");
    }
}
