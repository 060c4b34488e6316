#!/usr/bin/env bash
# Fetches the default model if it is missing, builds braid, and serves on 127.0.0.1:8080.
# Extra arguments go to `braid serve` (e.g. scripts/serve.sh --port 9000 --max-num-seqs 16).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-model.sh
target="${CARGO_TARGET_DIR:-target}/release/braid"
if [ ! -x "$target" ]; then
  echo "serve: building braid in release mode; the first build takes about 12 minutes on 2 cores" >&2
fi
cargo build --release --bin braid
exec "$target" serve "$@"
