#!/usr/bin/env bash
# The accuracy gate (docs/ACCURACY.md): braid's greedy text against the exact model, compared
# with llama.cpp's own quantized run against the same exact model.
#   LLAMA_BIN=dir/with/llama-server+llama-quantize scripts/accuracy.sh [MODEL]
# PROMPTS=scripts/accuracy-long-prompts.json TAG=.long CTX=8192 runs the long-prompt check (prompts of
# 1,500-3,500 tokens, where a prompt's bf16 attention matters most) into docs/accuracy/<model>.long.*.
# The exact model is `llama-quantize --allow-requantize MODEL F32-FILE F32`, written once
# into ${ACCURACY_CACHE:-~/.cache/braid-accuracy}. The three servers run one after another on
# 127.0.0.1, each with THREADS threads; the scores and every continuation go to
# docs/accuracy/<model>.json, the table to stdout and docs/accuracy/<model>.txt. Exits non-zero if the gate fails.
# TEACHER_FORCED=1 also scores every position of the exact continuations (scripts/accuracy.py);
# BASELINE=other/braid serves a second braid build beside the first, scored the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
: "${LLAMA_BIN:?set LLAMA_BIN to the bin directory of a llama.cpp build (llama-server, llama-quantize)}"
BRAID=${BRAID:-target/release/braid}
THREADS=${THREADS:-2}
PROMPTS=${PROMPTS:-scripts/accuracy-prompts.json}
CTX=${CTX:-2048}
TAG=${TAG:-}
TEACHER_FORCED=${TEACHER_FORCED:-}
BASELINE=${BASELINE:-}
CACHE=${ACCURACY_CACHE:-$HOME/.cache/braid-accuracy}
NAME=$(basename "$MODEL" .gguf)
EXACT="$CACHE/$NAME.F32.gguf"
OUT=docs/accuracy
mkdir -p "$CACHE" "$OUT"
[ -x "$BRAID" ] || cargo build --release
[ -f "$EXACT" ] || "$LLAMA_BIN/llama-quantize" --allow-requantize "$MODEL" "$EXACT" F32 >"$CACHE/quantize.log" 2>&1

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
start() {  # PORT, then the server command
  local port=$1; shift
  if curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
    echo "accuracy: something already answers on port $port (another accuracy run?); stop it first" >&2
    exit 1
  fi
  "$@" >"$CACHE/server-$port.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "accuracy: the server on port $port did not become ready (see $CACHE/server-$port.log)" >&2
  exit 1
}
start 18301 "$LLAMA_BIN/llama-server" -m "$EXACT" --host 127.0.0.1 --port 18301 -t "$THREADS" -c "$CTX" -np 1
start 18302 "$LLAMA_BIN/llama-server" -m "$MODEL" --host 127.0.0.1 --port 18302 -t "$THREADS" -c "$CTX" -np 1
start 18303 "$BRAID" serve --model "$MODEL" --host 127.0.0.1 --port 18303 --threads "$THREADS"
extra=()
if [ -n "$BASELINE" ]; then
  start 18304 "$BASELINE" serve --model "$MODEL" --host 127.0.0.1 --port 18304 --threads "$THREADS"
  extra+=(--baseline http://127.0.0.1:18304)
fi
[ -n "$TEACHER_FORCED" ] && extra+=(--teacher-forced)
{
  echo "model: $MODEL ($(sha256sum "$MODEL" | cut -c1-12)); exact: F32 from llama-quantize"
  echo "llama.cpp: $("$LLAMA_BIN/llama-server" --version 2>&1 | grep -m1 version || true)"
  echo "braid: $BRAID of $(git describe --always --dirty), kernel $("$BRAID" info --json --model "$MODEL" | python3 -c 'import json,sys; print(json.load(sys.stdin)["kernel"])')"
  [ -z "$BASELINE" ] || echo "braid baseline: $BASELINE"
  echo "cpu: $(lscpu | grep -E '^Model name:' | cut -d: -f2 | xargs), family $(lscpu | grep -E '^CPU family:' | cut -d: -f2 | xargs) model $(lscpu | grep -E '^Model:' | cut -d: -f2 | xargs)"
  echo
  python3 scripts/accuracy.py --exact http://127.0.0.1:18301 --llama http://127.0.0.1:18302 \
    --braid http://127.0.0.1:18303 --prompts "$PROMPTS" --json "$OUT/$NAME$TAG.json" "${extra[@]}"
} | tee "$OUT/$NAME$TAG.txt"
