#!/bin/bash
# The engine bench of the 5-bit change: bde16ba (the night before, Q5_0 copied into int8)
# and 6d6f95b (Q5_* kept 5-bit, packed blocks unpacked once per 64-row panel), alternating,
# three rounds, on Gemma 3 270M Q4_K_M (the only file here with Q5 tensors) and on the
# default model (all Q4_1, to show the 4-bit path did not move). Each binary is given as
# label=path; the JSON reports land next to this script.
#   docs/benchmarks/2026-12-05/engine/run.sh bde16ba=/path/braid 6d6f95b=/path/braid
set -euo pipefail
out=$(dirname "$0")
cd "$(dirname "$0")/../../../.."
G=models/gemma-3-270m-q4_k_m.gguf
S=models/SmolLM2-135M-Instruct.Q4_1.gguf
for r in 1 2 3; do
  for pair in "$@"; do
    l=${pair%%=*}; b=${pair#*=}
    for k in avx512vnni avx2; do
      BRAID_KERNEL=$k $b bench-engine --model $G --threads 2 --batch 1 --batch 16 \
        --prompt-tokens 512 --json > "$out/$l-gemma3-$k-r$r.json"
      BRAID_KERNEL=$k $b bench-engine --model $S --threads 2 --json > "$out/$l-smollm2-$k-r$r.json"
    done
    BRAID_KERNEL=avx512vnni $b bench-engine --model $S --threads 2 --context 4096 --batch 1 \
      --batch 16 --prompt-tokens 64 --json > "$out/$l-smollm2-4k-avx512vnni-r$r.json"
    echo "$l r$r load $(cut -d' ' -f1 /proc/loadavg)" >> "$out/log.txt"
  done
done
