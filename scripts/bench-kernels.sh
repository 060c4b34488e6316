#!/usr/bin/env bash
# Every kernel this CPU runs, side by side in one run (issue "Fast on every CPU"):
#   1. `braid bench-engine --kernel K` for each kernel `braid info` lists as supported, in
#      alternating rounds, plus an older braid binary (BASELINE_BRAID=path) if given, forced
#      to avx512vnni: did the portable build lose anything against it?
#      Each round also measures decode at a long context (LONG_CONTEXT, default 4096) for the
#      baseline and the fastest kernel: 1 and 16 sequences.
#   2. With LLAMA_SERVER_AVX2=path/to/llama-server built for AVX2 without AVX-512 (see
#      docs/PERFORMANCE.md for its flags): `braid bench scaling` at c=1 and c=16 against braid
#      forced to avx2 and against that llama-server, same GGUF, same threads, same client.
#      With LLAMA_SERVER=path/to/llama-server built for this CPU: the same, braid with the
#      kernel it picks against that one.
# Output: docs/benchmarks/<date>-kernels/ (raw JSON, and summary.md with medians).
# Usage: [KERNELS="k1 k2"] scripts/bench-kernels.sh [ROUNDS]   (default 5; every supported kernel)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
LONG_CONTEXT=${LONG_CONTEXT:-4096}
BRAID=${BRAID:-target/release/braid}
MODEL=${BRAID_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
PORT=${PORT:-18188}
OUT=${OUT:-docs/benchmarks/$(date -u +%Y-%m-%d)-kernels}
mkdir -p "$OUT"
[ -x "$BRAID" ] || cargo build --release
# KERNELS="avx512vnni avx2" measures only those (the portable reference takes minutes a round).
kernels=${KERNELS:-$("$BRAID" info --json --model "$MODEL" | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["supported_kernels"]))')}
{
  echo "date: $(date -u +%FT%TZ)"
  lscpu | grep -E '^(Model name|CPU family|Model|Flags):' | cut -c1-200
  echo "braid: $(git rev-parse --short HEAD)  kernels: $kernels  threads: $THREADS"
  echo "long context: $LONG_CONTEXT"
  [ -n "${BASELINE_BRAID:-}" ] && echo "baseline: $BASELINE_BRAID"
  [ -n "${LLAMA_SERVER_AVX2:-}" ] && echo "llama-server (AVX2): $LLAMA_SERVER_AVX2"
  [ -n "${LLAMA_SERVER:-}" ] && echo "llama-server (native): $LLAMA_SERVER"
  echo "load at start: $(cat /proc/loadavg)"
} >"$OUT/machine.txt"

echo "== engine alone, $ROUNDS rounds: ${BASELINE_BRAID:+baseline }$kernels" >&2
for i in $(seq "$ROUNDS"); do
  if [ -n "${BASELINE_BRAID:-}" ]; then
    BRAID_KERNEL=avx512vnni "$BASELINE_BRAID" bench-engine --model "$MODEL" --threads "$THREADS" --json >"$OUT/engine-baseline-$i.json"
  fi
  for k in $kernels; do
    "$BRAID" bench-engine --kernel "$k" --model "$MODEL" --threads "$THREADS" --json >"$OUT/engine-$k-$i.json"
  done
  long=(--context "$LONG_CONTEXT" --batch 1 --batch 16 --prompt-tokens 64 --model "$MODEL" --threads "$THREADS" --json)
  if [ -n "${BASELINE_BRAID:-}" ]; then
    BRAID_KERNEL=avx512vnni "$BASELINE_BRAID" bench-engine "${long[@]}" >"$OUT/long-baseline-$i.json"
  fi
  best=${kernels%% *}
  "$BRAID" bench-engine --kernel "$best" "${long[@]}" >"$OUT/long-$best-$i.json"
done

wait_ready() {
  for _ in $(seq 1 600); do
    curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "bench-kernels: server on port $PORT did not become ready" >&2
  exit 1
}
served() {  # LABEL, then the server command
  local label=$1; shift
  "$@" >"$OUT/$label-server.log" 2>&1 &
  local pid=$!
  wait_ready
  "$BRAID" bench scaling --url "http://127.0.0.1:$PORT" --label "$label" --seed 7 --out "$OUT/$label" \
    --concurrency 1,16 --prompt-tokens 24 --max-tokens 64 | tee "$OUT/$label-scaling.txt"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
if [ -n "${LLAMA_SERVER_AVX2:-}" ]; then
  echo "== served: braid forced to avx2 against llama.cpp built for AVX2" >&2
  mkdir -p "$OUT/braid-avx2" "$OUT/llama.cpp-avx2"
  served braid-avx2 env BRAID_KERNEL=avx2 "$BRAID" serve --port "$PORT" --model "$MODEL" --threads "$THREADS"
  served llama.cpp-avx2 "$LLAMA_SERVER_AVX2" -m "$MODEL" -t "$THREADS" -np 16 -c 32768 --no-cache-prompt --host 127.0.0.1 --port "$PORT"
fi
if [ -n "${LLAMA_SERVER:-}" ]; then
  echo "== served: braid with the kernel it picks against llama.cpp built for this CPU" >&2
  mkdir -p "$OUT/braid-best" "$OUT/llama.cpp-native"
  served braid-best "$BRAID" serve --port "$PORT" --model "$MODEL" --threads "$THREADS"
  served llama.cpp-native "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -np 16 -c 32768 --no-cache-prompt --host 127.0.0.1 --port "$PORT"
fi
echo "load at end: $(cat /proc/loadavg)" >>"$OUT/machine.txt"
python3 scripts/summarize-kernels.py "$OUT" | tee "$OUT/summary.md"
