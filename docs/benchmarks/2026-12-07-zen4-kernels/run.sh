#!/usr/bin/env bash
# AVX2 against AVX-512 VNNI on one CPU (issue 28's fourth target), alternating, ROUNDS times.
#   docs/benchmarks/2026-12-07-zen4-kernels/run.sh BRAID [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
braid=$1 rounds=${2:-3}
for r in $(seq 1 "$rounds"); do
  for k in avx512vnni avx2; do
    "$braid" bench-engine --kernel "$k" --prompt-tokens 512 --batch 1 --batch 16 --decode-steps 64 \
      --json >"$here/$k-$r.json"
  done
done
