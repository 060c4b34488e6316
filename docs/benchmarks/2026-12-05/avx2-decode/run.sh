#!/bin/bash
# A lone sequence's decode on the AVX2 kernel, the two builds alternating five times with
# longer runs than the engine bench's (its three rounds disagreed by more than the change).
#   docs/benchmarks/2026-12-05/avx2-decode/run.sh bde16ba=/path/braid 6d6f95b=/path/braid
set -euo pipefail
out=$(dirname "$0")
cd "$(dirname "$0")/../../../.."
for r in 1 2 3 4 5; do
  for pair in "$@"; do
    l=${pair%%=*}; b=${pair#*=}
    BRAID_KERNEL=avx2 $b bench-engine --model models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 \
      --batch 1 --batch 4 --prompt-tokens 64 --decode-steps 300 --json > "$out/$l-r$r.json"
  done
done
