#!/bin/bash
# Served, on the AVX2-only AMD EPYC (lscpu family 23, model 1): braid against llama-server on
# the default model (the same client commands as docs/benchmarks/2026-12-05/served), then the
# interference scenario at ITL targets of 50, 100 and 200 ms. One round.
#   docs/benchmarks/2026-12-05-zen/served/run.sh BRAID LLAMA_SERVER
set -uo pipefail
BRAID=${1:?braid binary}; LLAMA=${2:?llama-server binary}
out=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$0")/../../../.."
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
{ echo "date: $(date -u +%FT%TZ)"; lscpu | grep -E '^(Model name|CPU family|Model):'
  echo "load at start: $(cat /proc/loadavg)"; } > "$out/machine.txt"
wait_up() { for _ in $(seq 90); do curl -sf "localhost:$1/health" >/dev/null && return; sleep 1; done; }
for v in braid llama; do
  if [ $v = braid ]; then $BRAID serve --model $M --port 8733 > "$out/serve-$v.log" 2>&1 &
  else $LLAMA -m $M -t 2 -np 16 -c 32768 --no-cache-prompt --host 127.0.0.1 --port 8733 \
    > "$out/serve-$v.log" 2>&1 &
  fi
  pid=$!; wait_up 8733
  $BRAID bench scaling --url http://127.0.0.1:8733 --seed 7 --concurrency 1,16,32 \
    --prompt-tokens 24 --max-tokens 64 --label $v --out "$out/scaling-$v" > "$out/scaling-$v.txt" 2>&1
  $BRAID bench scaling --url http://127.0.0.1:8733 --seed 7 --concurrency 1 --requests-per-level 16 \
    --prompt-tokens 24 --max-tokens 64 --label $v-c1x16 --out "$out/c1x16-$v" > "$out/c1x16-$v.txt" 2>&1
  kill $pid; wait $pid 2>/dev/null
done
for t in 50 100 200; do
  $BRAID serve --model $M --port 8732 --itl-target-ms $t > "$out/serve-$t.log" 2>&1 &
  pid=$!; wait_up 8732
  $BRAID bench interference --url http://127.0.0.1:8732 --seed 7 --decoders 4 --decode-tokens 400 \
    --long-prompt-tokens 1200 --long-prompts 3 --interval-secs 3 --label itl-$t \
    --out "$out/interference-$t" > "$out/interference-$t.txt" 2>&1
  kill $pid; wait $pid 2>/dev/null
done
echo "load at end: $(cat /proc/loadavg)" >> "$out/machine.txt"
