#!/usr/bin/env bash
# The Arm (aarch64) tests on an x86 machine: cross-compiles braid-model and runs its unit tests
# (the NEON kernels bit for bit against the portable reference, attention, the KV pool,
# sampling) and the tiny-model forward tests under qemu-user, which emulates a CPU with every
# Arm feature, so both NEON kernels (neon, neon-i8mm) run. scripts/install-test-tools.sh
# installs what it needs (the Rust target, Debian's cross gcc and libc, qemu-user-static);
# .cargo/config.toml names the linker and the qemu runner.
#
# Not run here: tests/real_model.rs needs the 98 MB model and would take many minutes of
# emulated forward passes, for no Arm-specific coverage the tiny model does not give; and the
# other crates (server, engine, scheduler) have no Arm-specific code.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
target=aarch64-unknown-linux-gnu

for tool in aarch64-linux-gnu-gcc qemu-aarch64-static; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "test-arm: $tool is missing; scripts/install-test-tools.sh installs it" >&2
    exit 1
  fi
done

echo "test-arm: braid-model on $target under qemu. This checks correctness only: qemu's timings say nothing about a real Arm CPU."
# The NEON kernel file is compiled only for aarch64, so the native clippy never sees it.
cargo clippy --release --target "$target" -p braid-model --all-targets -- -D warnings
cargo test --release --target "$target" -p braid-model --lib --test tiny_model
echo "test-arm: passed under qemu (correctness only; qemu's timings say nothing about a real Arm CPU)."
