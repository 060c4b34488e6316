#!/bin/bash
# The engine bench on the AVX2-only AMD EPYC (lscpu family 23, model 1): bf90ae5 (where issue
# 14 started) against the build that closes it, alternating, one round (the session had time for no more), each with the kernel
# the CPU chooses (avx2: it has neither AVX-512 nor AVX-VNNI). The default model at 128 and
# 4096 tokens of context and Gemma 3 270M Q4_K_M (the file with Q5 tensors). Each binary is
# given as label=path; the JSON reports and the load log land next to this script.
#   docs/benchmarks/2026-12-05-zen/engine/run.sh bf90ae5=/path/braid new=/path/braid
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$0")/../../../.."
S=models/SmolLM2-135M-Instruct.Q4_1.gguf
G=models/gemma-3-270m-q4_k_m.gguf
{ echo "date: $(date -u +%FT%TZ)"; lscpu | grep -E '^(Model name|CPU family|Model):'
  echo "load at start: $(cat /proc/loadavg)"; } > "$out/machine.txt"
for r in 1; do
  for pair in "$@"; do
    l=${pair%%=*}; b=${pair#*=}
    $b bench-engine --model $S --threads 2 --json > "$out/$l-smollm2-r$r.json"
    $b bench-engine --model $S --threads 2 --context 4096 --batch 1 --batch 16 \
      --prompt-tokens 64 --json > "$out/$l-smollm2-4k-r$r.json"
    # bf90ae5 runs only llama models: Gemma 3 is measured where the build loads it.
    $b bench-engine --model $G --threads 2 --batch 1 --batch 16 --prompt-tokens 512 \
      --json > "$out/$l-gemma3-r$r.json" 2>/dev/null || rm "$out/$l-gemma3-r$r.json"
    echo "$l r$r load $(cut -d' ' -f1 /proc/loadavg)" >> "$out/machine.txt"
  done
done
echo "load at end: $(cat /proc/loadavg)" >> "$out/machine.txt"
