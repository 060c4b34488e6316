#!/bin/bash
# SmolLM2-135M-Instruct Q4_K_M (made here: the default file to F32 with `llama-quantize
# --allow-requantize`, then `llama-quantize F32-FILE OUT Q4_K_M`; 112 of its 210 matrices are
# Q5_0), the two builds alternating, three rounds.
#   docs/benchmarks/2026-12-05/smollm2-q4km/run.sh FILE bde16ba=/path/braid 6d6f95b=/path/braid
set -euo pipefail
out=$(dirname "$0")
file=$1; shift
for r in 1 2 3; do
  for pair in "$@"; do
    l=${pair%%=*}; b=${pair#*=}
    BRAID_KERNEL=avx512vnni $b bench-engine --model "$file" --threads 2 --json > "$out/$l-r$r.json"
  done
done
