#!/usr/bin/env bash
# Issue 28's "today's" figures on this CPU: the build the issue was filed against (BASE,
# 959ee2e) and a later build (NEW) side by side, alternating within each round. The engine
# alone (one fresh prompt of 512, 2,048 and 4,096 tokens; decode of 1 and 16 sequences at
# 4,096 tokens of context), then the interference scenario against each build's server at an
# ITL target of 100 ms, driven by NEW's client; NEW runs it twice, as it serves by default and
# with --speculative off (BASE had no speculative decoding: its decoders decode one token a
# step throughout, where NEW's n-gram drafts let them finish sooner).
#   docs/benchmarks/2026-12-07-against-issue-28/run.sh BASE NEW [ROUNDS]
# BASE is 959ee2e with base-own-contexts.patch applied: as released, its bench-engine gave the
# decoding sequences one shared context, which can stay in cache; the patch gives each sequence
# a copy of its own, as distinct requests have and as NEW's does. Build it with
#   git worktree add /tmp/base 959ee2e && git -C /tmp/base apply $PWD/base-own-contexts.patch
#   (cd /tmp/base && cargo build --release --bin braid)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
base=$1 new=$2 rounds=${3:-3}
cd "$here/../../.."
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
{ echo "date: $(date -u +%FT%TZ)"; lscpu | grep -E '^(Model name|CPU family|Model):'
  echo "load at start: $(cat /proc/loadavg)"; } > "$here/machine.txt"
engine() {  # NAME BINARY ROUND
  for n in 512 2048 4096; do
    "$2" bench-engine --model $M --prompt-tokens $n --batch 1 --decode-steps 1 --json \
      >"$here/$1-prefill$n-$3.json"
  done
  "$2" bench-engine --model $M --prompt-tokens 64 --batch 1 --batch 16 --context 4096 \
    --decode-steps 32 --json >"$here/$1-decode4k-$3.json"
}
wait_up() { for _ in $(seq 180); do curl -sf "localhost:$1/health" >/dev/null && return; sleep 1; done; }
interference() {  # NAME BINARY ROUND [SERVE FLAGS]
  "$2" serve --model $M --port 8734 --itl-target-ms 100 "${@:4}" >"$here/serve-$1-$3.log" 2>&1 &
  local pid=$!
  wait_up 8734
  "$new" bench interference --url http://127.0.0.1:8734 --seed 7 --decoders 4 \
    --decode-tokens 400 --long-prompt-tokens 1200 --long-prompts 3 --interval-secs 3 \
    --label "$1-$3" --out "$here/interference-$1-$3" >"$here/interference-$1-$3.txt" 2>&1
  kill $pid; wait $pid 2>/dev/null || true
}
for r in $(seq 1 "$rounds"); do
  engine base "$base" "$r"
  engine new "$new" "$r"
  interference base "$base" "$r"
  interference new "$new" "$r"
  interference new-nospec "$new" "$r" --speculative off
done
echo "load at end: $(cat /proc/loadavg)" >> "$here/machine.txt"
python3 "$here/summary.py" "$here" "$rounds" | tee "$here/summary.md"
