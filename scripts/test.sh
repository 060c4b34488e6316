#!/usr/bin/env bash
# Runs every test: fetches the models if missing (the default one and Gemma 3 270M, which a
# smaller set of end-to-end tests runs on), installs what the end-to-end tests use
# (a Python venv with the openai client and pytest, oha, Debian's chromium and nginx, the
# aarch64 cross toolchain and qemu: the first run needs root for apt-get), checks formatting
# and lints, builds once in release, then runs the Rust tests, braid-model's tests on aarch64
# under qemu (scripts/test-arm.sh), and the end-to-end suite against the real binary on the
# real model.
# Extra arguments go to pytest (scripts/test.sh -k prefix_cache).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

scripts/fetch-model.sh
scripts/fetch-model.sh gemma3-270m
scripts/install-test-tools.sh

cargo fmt --all --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo build --release --bin braid
cargo test --release --workspace
scripts/test-arm.sh

export BRAID_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/braid"
.venv/bin/python -m pytest -q tests/e2e "$@"
