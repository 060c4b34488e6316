//! braid-bench
