#!/usr/bin/env bash
# The Arm (aarch64) tests on an x86 machine: cross-compiles the crate that holds braid's
# ISA-specific code and runs the tests of that code under qemu-user, which emulates a CPU with
# every Arm feature, so both NEON kernels (neon, neon-i8mm) run: the kernels bit for bit against
# the portable reference, and attention. scripts/install-test-tools.sh installs what it needs
# (the Rust target, Debian's cross gcc and libc, qemu-user-static); .cargo/config.toml names the
# linker and the qemu runner.
#
# Only braid-kernels: the rest (the model, tokenizers, templates, constraints, sampling) is
# the same code on every CPU, is tested natively, and under emulation would only take minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
target=aarch64-unknown-linux-gnu
# The crate with the ISA-specific code: the kernels and attention.
crate=braid-kernels

for tool in aarch64-linux-gnu-gcc qemu-aarch64-static; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "test-arm: $tool is missing; scripts/install-test-tools.sh installs it" >&2
    exit 1
  fi
done

echo "test-arm: $crate on $target under qemu. This checks correctness only: qemu's timings say nothing about a real Arm CPU."
# The NEON kernel file is compiled only for aarch64, so the native clippy never sees it.
# The format checks against ggml's dequantization (through candle) are left to the native run:
# packing is the same code on every CPU, and candle would be most of the cross build.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="--cfg braid_emulated"
cargo clippy --release --target "$target" -p "$crate" --all-targets -- -D warnings
cargo test --release --target "$target" -p "$crate"
echo "test-arm: passed under qemu (correctness only; qemu's timings say nothing about a real Arm CPU)."
