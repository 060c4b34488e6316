#!/usr/bin/env bash
# A prompt's bf16 softmax weights from a degree-3 power of two instead of the f32 exponential:
# two builds alternating within each round, `braid bench-engine` prefill of one fresh prompt
# of 512, 2,048 and 4,096 tokens (the default kernel; decode does not take this path). Later
# prompt changes are measured with it too, their reports going to OUT_DIR (default: this
# folder).
#   docs/benchmarks/2026-12-07-bf16-weights/run.sh BEFORE AFTER [ROUNDS] [OUT_DIR]
set -euo pipefail
before=$1 after=$2 rounds=${3:-3}
here=$(cd "${4:-$(dirname "$0")}" && pwd)
cd "$(dirname "$0")/../../.."
{ echo "date: $(date -u +%FT%TZ)"; lscpu | grep -E '^(Model name|CPU family|Model):'
  echo "load at start: $(cat /proc/loadavg)"; } > "$here/machine.txt"
for r in $(seq 1 "$rounds"); do
  for name in before after; do
    bin=$before; [ $name = after ] && bin=$after
    "$bin" bench-engine --prompt-tokens 512 --prompt-tokens 2048 --prompt-tokens 4096 \
      --batch 1 --decode-steps 1 --json >"$here/$name-$r.json"
  done
done
echo "load at end: $(cat /proc/loadavg)" >> "$here/machine.txt"
python3 - "$here" "$rounds" <<'PY' | tee "$here/summary.md"
import json, statistics, sys
here, rounds = sys.argv[1], int(sys.argv[2])
rate = lambda name, r: {p["prompt_tokens"]: p["tokens_per_sec"] for p in json.load(open(f"{here}/{name}-{r}.json"))["prefill"]}
print("| prompt tokens | before, per round | after, per round | after ÷ before, per round | medians |")
print("|---|---|---|---|---|")
for n in (512, 2048, 4096):
    b = [rate("before", r)[n] for r in range(1, rounds + 1)]
    a = [rate("after", r)[n] for r in range(1, rounds + 1)]
    ratios = [x / y for x, y in zip(a, b)]
    print(f"| {n} | {', '.join(f'{x:.0f}' for x in b)} | {', '.join(f'{x:.0f}' for x in a)} | "
          f"{', '.join(f'{x:.2f}' for x in ratios)} | {statistics.median(b):.0f} → {statistics.median(a):.0f} ({statistics.median(ratios):.2f}×) |")
PY
