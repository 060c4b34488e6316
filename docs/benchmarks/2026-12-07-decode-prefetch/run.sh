#!/usr/bin/env bash
# Decode at 4,096 tokens of context, the build before the cross-pass prefetch against the one
# with it, alternating, f16 and q8_0 caches.
#   docs/benchmarks/2026-12-07-decode-prefetch/run.sh BEFORE AFTER [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 rounds=${3:-2}
for r in $(seq 1 "$rounds"); do
  for b in before after; do
    bin=${!b}
    "$bin" bench-engine --batch 1 --batch 16 --context 4096 --decode-steps 32 --json >"$here/$b-f16-$r.json"
    "$bin" bench-engine --batch 1 --batch 16 --context 4096 --prompt-tokens 64 --decode-steps 32 \
      --kv-cache-dtype q8_0 --json >"$here/$b-q8-$r.json"
  done
done
