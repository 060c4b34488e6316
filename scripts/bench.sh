#!/usr/bin/env bash
# The standard benchmark suite: builds release, starts braid on the default model, runs
# `braid bench` scaling / interference (braided and with --no-chunked-prefill) / poisson /
# prefix-cache and the engine alone (also once per kernel the CPU supports), writes
# docs/benchmarks/<date>/ (JSON + SVG) and its report, README.md (quote its figures in docs/PERFORMANCE.md's
# section for this CPU). With LLAMA_SERVER=/path/to/llama-server, the same suite also
# runs against llama.cpp's server on the same GGUF with the same threads, in the same run,
# and the report gives braid/llama.cpp ratios.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${BRAID_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-$(nproc)}
OUT=${OUT:-docs/benchmarks/$(date -u +%Y-%m-%d)}
BRAID=${CARGO_TARGET_DIR:-target}/release/braid
PORT=${PORT:-18080}

scripts/fetch-model.sh
cargo build --release --quiet --bin braid
mkdir -p "$OUT"
# Other work on a shared machine skews every figure: record how busy it was.
echo "start: $(cat /proc/loadavg)" >"$OUT/load.txt"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; pids=(); }
trap cleanup EXIT

wait_ready() {
  for _ in $(seq 1 600); do
    curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "bench: server on port $PORT did not become ready" >&2
  exit 1
}

start_braid() {
  "$BRAID" serve --port "$PORT" --model "$MODEL" --threads "$THREADS" "$@" >"$OUT/braid-server.log" 2>&1 &
  pids+=($!)
  wait_ready
}

# The same scenarios for any server.
suite() {
  local label=$1 dir=$2
  mkdir -p "$dir/overload"
  local common=(--url "http://127.0.0.1:$PORT" --label "$label" --seed 7)
  "$BRAID" bench scaling "${common[@]}" --out "$dir" --concurrency 1,2,4,8,16,32 --prompt-tokens 24 --max-tokens 64 | tee "$dir/scaling.txt"
  "$BRAID" bench interference "${common[@]}" --out "$dir" --decoders 4 --decode-tokens 400 --long-prompt-tokens 1200 \
    --long-prompts 3 --interval-secs 3 | tee "$dir/interference.txt"
  # 1.5 requests/s is about half of what braid reads and writes on 2 cores; 3/s is more than it can.
  local mix=(--prompt-mix 32:0.5,256:0.3,1024:0.2 --max-tokens 64 --slo-ttft-ms 2000 --slo-itl-p99-ms 150)
  "$BRAID" bench poisson "${common[@]}" --out "$dir" --rate 1.5 --duration-secs 40 "${mix[@]}" | tee "$dir/poisson.txt"
  "$BRAID" bench poisson "${common[@]}" --out "$dir/overload" --rate 3 --duration-secs 30 "${mix[@]}" | tee "$dir/poisson-overload.txt"
  # The same long prompts cold, then again, then sharing a prefix: what a prefix cache saves
  # (llama.cpp runs with --no-cache-prompt here, so it reuses nothing).
  "$BRAID" bench prefix-cache "${common[@]}" --out "$dir" --prompts 8 --prompt-tokens 1000 --shared-prompts 8 \
    --prefix-tokens 1000 --suffix-tokens 24 --max-tokens 8 | tee "$dir/prefix-cache.txt"
}

echo "== engine alone" >&2
"$BRAID" bench-engine --model "$MODEL" --threads "$THREADS" --compare-kernels --json >"$OUT/engine.json"
for ctx in 1024 4096; do
  "$BRAID" bench-engine --model "$MODEL" --threads "$THREADS" --batch 1,16 --context "$ctx" --json >"$OUT/engine-context-$ctx.json"
done
# One process computes with one kernel: a run per kernel this CPU supports, fastest first.
"$BRAID" info --model "$MODEL" --threads "$THREADS" --json >"$OUT/info.json"
for kernel in $(python3 -c 'import json, sys; print(*json.load(open(sys.argv[1]))["supported_kernels"])' "$OUT/info.json"); do
  echo "== engine alone, kernel $kernel" >&2
  "$BRAID" bench-engine --model "$MODEL" --threads "$THREADS" --kernel "$kernel" --json >"$OUT/engine-kernel-$kernel.json"
done

echo "== braid" >&2
start_braid
suite braid "$OUT/braid"
ps -o rss= -p "${pids[0]}" | awk '{print $1 * 1024}' >"$OUT/braid-rss-bytes.txt"
cleanup

echo "== braid --no-chunked-prefill" >&2
start_braid --no-chunked-prefill --max-batched-tokens 2048
mkdir -p "$OUT/braid-no-chunking"
"$BRAID" bench interference --url "http://127.0.0.1:$PORT" --label "braid --no-chunked-prefill" --out "$OUT/braid-no-chunking" \
  --seed 7 --decoders 4 --decode-tokens 400 --long-prompt-tokens 1200 --long-prompts 3 --interval-secs 3 | tee "$OUT/braid-no-chunking/interference.txt"
cleanup

if [ -n "${LLAMA_SERVER:-}" ]; then
  echo "== llama.cpp ($LLAMA_SERVER)" >&2
  "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -np 16 -c 32768 --no-cache-prompt --host 127.0.0.1 --port "$PORT" >"$OUT/llama-server.log" 2>&1 &
  pids+=($!)
  wait_ready
  suite llama.cpp "$OUT/llama.cpp"
  cleanup
  echo "== llama.cpp -b 128 -ub 128 (the usual advice against stalls)" >&2
  "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -np 16 -c 32768 --no-cache-prompt -b 128 -ub 128 --host 127.0.0.1 --port "$PORT" >"$OUT/llama-server-b128.log" 2>&1 &
  pids+=($!)
  wait_ready
  mkdir -p "$OUT/llama.cpp-b128"
  "$BRAID" bench interference --url "http://127.0.0.1:$PORT" --label "llama.cpp -b 128 -ub 128" --out "$OUT/llama.cpp-b128" \
    --seed 7 --decoders 4 --decode-tokens 400 --long-prompt-tokens 1200 --long-prompts 3 --interval-secs 3 | tee "$OUT/llama.cpp-b128/interference.txt"
  cleanup
  for s in scaling interference poisson overload/poisson prefix-cache; do
    "$BRAID" bench compare "$OUT/braid/$s.json" "$OUT/llama.cpp/$s.json" >"$OUT/compare-${s//\//-}.txt"
  done
fi

echo "end: $(cat /proc/loadavg)" >>"$OUT/load.txt"
python3 scripts/render-performance.py "$OUT" >"$OUT/README.md"
echo "bench: wrote $OUT and its report $OUT/README.md" >&2
