#!/usr/bin/env bash
# The served prompt-length curve (issue 28's first target), braid against llama.cpp.
#   docs/benchmarks/2026-12-06-prompt-curve/run.sh BRAID LLAMA_SERVER MODEL [ROUNDS] [OUT_DIR]
# Starts braid (defaults) on 8191 and llama-server (2 threads, one slot, 8,192 tokens of
# context, no prompt cache) on 8192, then ttft.py: prompts of 500, 2,000, 4,000 and 7,000
# tokens, one at a time, braid then llama.cpp, ROUNDS times (default 2). Logs and ttft.json go
# to OUT_DIR (default: this folder).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
braid=$1 llama=$2 model=$3 rounds=${4:-2} out=${5:-$here}
mkdir -p "$out"
"$braid" serve --model "$model" --port 8191 >"$out/braid.log" 2>&1 &
b=$!
"$llama" -m "$model" -t 2 -np 1 -c 8192 --no-cache-prompt --port 8192 >"$out/llama.log" 2>&1 &
l=$!
trap 'kill $b $l 2>/dev/null || true' EXIT
for port in 8191 8192; do
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
done
sleep 3  # braid's calibration steps
python3 "$here/ttft.py" http://127.0.0.1:8191 http://127.0.0.1:8192 "$rounds" "$out/ttft.json"
