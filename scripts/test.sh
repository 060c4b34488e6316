#!/usr/bin/env bash
# Runs every test: fetches the models if missing (the default one; Gemma 3 270M, which a
# smaller set of end-to-end tests runs on; and all-MiniLM-L6-v2, the embedding model that
# tests/e2e/test_embeddings.py serves), installs what the end-to-end tests use
# (a Python venv with the openai client and pytest, oha, Debian's chromium and nginx, the
# aarch64 cross toolchain and qemu: the first run needs root for apt-get), checks formatting
# and lints, builds once in release, then runs the Rust tests, the kernels' tests on aarch64
# under qemu (scripts/test-arm.sh), and the end-to-end suite against the real binary on the
# real model, two test files at a time (tests/e2e/conftest.py says which tests run alone).
# Ends with each phase's wall time, also when a phase fails (the exit status is then that
# phase's).
# Extra arguments go to pytest (scripts/test.sh -k prefix_cache; -n 0 runs one file at a time).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

phase_names=()
phase_secs=()
phase=""
phase_started=0
suite_started=$EPOCHREALTIME

# Closes the running phase (if any) and opens the next one.
start_phase() {
  end_phase
  phase=$1
  phase_started=$EPOCHREALTIME
}

end_phase() {
  if [ -n "$phase" ]; then
    phase_names+=("$phase")
    phase_secs+=("$(elapsed_since "$phase_started")")
    phase=""
  fi
}

elapsed_since() {
  awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'
}

print_timings() {
  local status=$? failed=$phase
  end_phase
  echo
  echo "test.sh phase timings (wall seconds):"
  local i
  for i in "${!phase_names[@]}"; do
    printf '  %-11s %7s\n' "${phase_names[$i]}" "${phase_secs[$i]}"
  done
  printf '  %-11s %7s\n' total "$(elapsed_since "$suite_started")"
  if [ "$status" -ne 0 ]; then
    echo "test.sh: failed in phase '${failed:-?}' (exit status $status)"
  fi
  exit "$status"
}
trap print_timings EXIT

start_phase fetch
scripts/fetch-model.sh
scripts/fetch-model.sh gemma3-270m
scripts/fetch-model.sh all-minilm-l6-v2

start_phase tools
scripts/install-test-tools.sh

start_phase fmt
cargo fmt --all --check

start_phase clippy
cargo clippy --release --workspace --all-targets -- -D warnings

# One build for the binary and every test target: with the test targets in the same command,
# cargo resolves the dev-dependencies' features (braid-model's test-util, reqwest's blocking)
# once, so `cargo test` below finds every crate built and the binary carries the same
# braid-model as the tests. Built alone, the binary would need its own braid-model and every
# crate above it, a second build of most of the workspace.
start_phase build
cargo build --release --workspace --bins --tests --examples

start_phase rust-tests
cargo test --release --workspace

start_phase arm-tests
scripts/test-arm.sh

start_phase e2e
export BRAID_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/braid"
.venv/bin/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests/e2e "$@"
end_phase
