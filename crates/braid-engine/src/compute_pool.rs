//! The compute threads: rayon's global pool, which every forward fans out to.
//!
//! rayon's global pool can be built once per process; a second `build_global` fails. Both
//! `braid serve` and the model's own commands need it, and tests start many servers in one
//! process, so it is built here and only here, behind a `OnceLock`: the first caller sizes it,
//! later callers get the pool that exists (a different size asked for is logged, not
//! silently dropped).

use std::sync::OnceLock;

static THREADS: OnceLock<usize> = OnceLock::new();

/// Sets up the compute pool with `threads` threads if it is not set up yet; returns the
/// pool's size.
pub fn init(threads: usize) -> usize {
    let n = *THREADS.get_or_init(|| {
        let built = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("braid-compute-{i}"))
            .build_global();
        match built {
            Ok(()) => threads,
            // Parallel work ran before anyone called `init`, and rayon started its default pool.
            Err(_) => rayon::current_num_threads(),
        }
    });
    if n != threads {
        tracing::warn!(
            requested = threads,
            running = n,
            "the compute pool is already running with {n} threads; keeping it"
        );
    }
    n
}
