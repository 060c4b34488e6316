#!/usr/bin/env bash
# Decoding at 4,096 tokens of context with the q8_0 KV cache, its keys scored by int8 dot
# products (NEW) against the build before (BEFORE) and the build issue 28 was filed against
# (ISSUE, 959ee2e with ../2026-12-07-against-issue-28/base-own-contexts.patch, which has only
# the f16 cache), alternating within each round: `braid bench-engine`, 1 and 16 sequences, on
# the CPU's own kernel, and BEFORE and NEW's q8_0 also on the AVX2 kernel.
#   docs/benchmarks/2026-12-07-q8-key-scores/run.sh ISSUE BEFORE NEW [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
issue=$1 before=$2 new=$3 rounds=${4:-3}
cd "$here/../../.."
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
{ echo "date: $(date -u +%FT%TZ)"; lscpu | grep -E '^(Model name|CPU family|Model):'
  echo "load at start: $(cat /proc/loadavg)"; } > "$here/machine.txt"
decode() {  # NAME BINARY ROUND [FLAGS]
  "$2" bench-engine --model $M --prompt-tokens 64 --batch 1 --batch 16 --context 4096 \
    --decode-steps 32 --json "${@:4}" >"$here/$1-$3.json"
}
for r in $(seq 1 "$rounds"); do
  decode issue-f16 "$issue" "$r"
  decode before-f16 "$before" "$r" --kv-cache-dtype f16
  decode before-q8_0 "$before" "$r" --kv-cache-dtype q8_0
  decode new-f16 "$new" "$r" --kv-cache-dtype f16
  decode new-q8_0 "$new" "$r" --kv-cache-dtype q8_0
  decode before-q8_0-avx2 "$before" "$r" --kv-cache-dtype q8_0 --kernel avx2
  decode new-q8_0-avx2 "$new" "$r" --kv-cache-dtype q8_0 --kernel avx2
done
echo "load at end: $(cat /proc/loadavg)" >> "$here/machine.txt"
python3 "$here/summary.py" "$here" "$rounds" | tee "$here/summary.md"
