#!/usr/bin/env bash
# Runs braid-kernels' unsafe code under Miri: the int8 matmul, the KV pool and attention. Miri
# catches what the compiler does not: aliasing violations, out-of-bounds pointer arithmetic,
# data races between rayon tasks, reads of uninitialized memory. The set stays small enough to
# run in a few minutes; the tests shrink their sizes under Miri.
#
# Miri runs no SIMD intrinsics such as AVX-512 or F16C, so the tests build for plain x86-64
# instead of the host CPU of .cargo/config.toml (where the `half` crate and the KV pool would
# convert with F16C and AVX-512), and `cfg(miri)` picks the portable matmul kernel.
#
#   scripts/miri.sh            install the nightly toolchain with Miri if needed, run the tests
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly miri --version >/dev/null 2>&1 ||
    ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
    rustup toolchain install nightly --component miri,rust-src --profile minimal
fi
# Miri builds its own standard library once (kept in ~/.cache/miri).
cargo +nightly miri setup >/dev/null

# Two CPUs, so rayon runs two workers and Miri checks the tasks that share an output for races.
# Tree Borrows rather than Stacked Borrows: rayon's crossbeam-epoch breaks Stacked Borrows'
# rules, not Tree Borrows' (crossbeam-rs/crossbeam#545, rayon-rs/rayon#1185); its casts of
# integers to pointers need permissive provenance. Rayon's global pool outlives the tests.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-num-cpus=2 -Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks}"
# RUSTFLAGS replaces the config's rustflags (a `--config` value would be added to them).
# exp_approx's test holds no unsafe code, and checks against std's `exp`, which Miri makes
# deliberately imprecise.
RUSTFLAGS="-C target-cpu=x86-64" cargo +nightly miri test -p braid-kernels --lib -- \
    --skip exp_approx_is_within_a_few_ulp
