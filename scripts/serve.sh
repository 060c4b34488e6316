#!/usr/bin/env bash
# Fetches the default model if it is missing, builds braid, and serves on 127.0.0.1:8080.
# Extra arguments go to `braid serve` (e.g. scripts/serve.sh --port 9000 --max-num-seqs 16).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh
cargo build --release --quiet --bin braid
exec "${CARGO_TARGET_DIR:-target}/release/braid" serve "$@"
