#!/usr/bin/env bash
# Issue 28's interference scenario against several builds' servers, alternating within each
# round: `braid serve --itl-target-ms 100 --speculative off` (drafting off, so that the
# decoders do not finish early and leave the long prompts an idle server sooner; builds from
# before drafting, such as issue 28's 959ee2e, have no such flag and no drafting), then `braid
# bench interference` (4 decoders of 400 tokens, three 1,200-token prompts 3 s apart) run by
# the last build named.
#   docs/benchmarks/2026-12-08-value-runs/interference.sh ROUNDS NAME=BINARY...
# (ROUNDS 0 only prints the table of the reports already here.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=$1; shift
cd "$here/../../.."
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
bench=${*: -1}; bench=${bench#*=}
wait_up() { for _ in $(seq 180); do curl -sf "localhost:$1/health" >/dev/null && return; sleep 1; done; }
for r in $(seq 1 "$rounds"); do
  for build in "$@"; do
    name=${build%%=*} bin=${build#*=}
    off=(); "$bin" serve --help | grep -q -- --speculative && off=(--speculative off)
    "$bin" serve --model $M --port 8734 --itl-target-ms 100 "${off[@]}" \
      >"$here/serve-$name-$r.log" 2>&1 &
    pid=$!
    wait_up 8734
    "$bench" bench interference --url http://127.0.0.1:8734 --seed 7 --decoders 4 \
      --decode-tokens 400 --long-prompt-tokens 1200 --long-prompts 3 --interval-secs 3 \
      --label "$name-$r" --out "$here/interference-$name-$r" >"$here/interference-$name-$r.txt" 2>&1
    kill $pid; wait $pid 2>/dev/null || true
  done
done
echo "| run | long prompts' TTFT p50, ms | the first (beside the decoders), ms | decoders' ITL p99, ms | worst gap, ms | stalls |"
echo "|---|---|---|---|---|---|"
for f in "$here"/interference-*.txt; do
  long=$(grep -E '^long +[0-9]' "$f") dec=$(grep -E '^decoder ' "$f")
  first=$(awk '$1 == "4" && NF == 6 {print $4}' "$f")
  echo "| $(basename "$f" .txt) | $(echo "$long" | awk '{print $6}') | $first |" \
    "$(echo "$dec" | awk '{print $12}') | $(echo "$dec" | awk '{print $13}') | $(echo "$dec" | awk '{print $18}') |"
done
