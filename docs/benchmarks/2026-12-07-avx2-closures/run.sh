#!/usr/bin/env bash
# The AVX2 kernel before and after its float loops stopped calling intrinsics out of line, and
# the AVX-512 VNNI kernel of the same build beside them, alternating within each round: three
# fresh 512-token prompts per run (the median is reported), one of 2,048 and one of 4,096
# tokens, and decode of 1 and 16 sequences at 128 tokens of context.
#   docs/benchmarks/2026-12-07-avx2-closures/run.sh BEFORE AFTER [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 rounds=${3:-3}
run() {  # NAME BINARY KERNEL ROUND
  "$2" bench-engine --kernel "$3" --prompt-tokens 512 --prompt-tokens 512 --prompt-tokens 512 \
    --prompt-tokens 2048 --prompt-tokens 4096 --batch 1 --batch 16 --decode-steps 32 --json \
    >"$here/$1-$4.json"
}
for r in $(seq 1 "$rounds"); do
  run before-avx2 "$before" avx2 "$r"
  run after-avx2 "$after" avx2 "$r"
  run after-vnni "$after" avx512vnni "$r"
done
python3 - "$here" "$rounds" <<'PY'
import json, statistics, sys
here, rounds = sys.argv[1], int(sys.argv[2])
runs = ("before-avx2", "after-avx2", "after-vnni")
print("| run | round | prefill 512 | prefill 2,048 | prefill 4,096 | decode 1 | decode 16 |")
print("|---|---|---|---|---|---|---|")
rows = {}
for r in range(1, rounds + 1):
    for name in runs:
        j = json.load(open(f"{here}/{name}-{r}.json"))
        rate = lambda n: [p["tokens_per_sec"] for p in j["prefill"] if p["prompt_tokens"] == n]
        dec = {d[0]: d[1] for d in j["decode"]}
        row = (statistics.median(rate(512)), rate(2048)[0], rate(4096)[0], dec[1], dec[16])
        rows[name, r] = row
        print(f"| {name} | {r} | " + " | ".join(f"{x:.0f}" for x in row) + " |")
med = lambda name, i: statistics.median(rows[name, r][i] for r in range(1, rounds + 1))
cols = ("prefill 512", "prefill 2,048", "prefill 4,096", "decode 1", "decode 16")
print("\nmedians of the rounds; each round's ratios side by side in that round:")
for i, col in enumerate(cols):
    gain = [rows["after-avx2", r][i] / rows["before-avx2", r][i] for r in range(1, rounds + 1)]
    share = [rows["after-avx2", r][i] / rows["after-vnni", r][i] for r in range(1, rounds + 1)]
    print(f"{col:14s} avx2 before {med('before-avx2', i):6.0f}  after {med('after-avx2', i):6.0f}"
          f"  ({statistics.median(gain):.2f}x, rounds {min(gain):.2f}-{max(gain):.2f})"
          f"  vnni {med('after-vnni', i):6.0f}  avx2/vnni {statistics.median(share):.2f}"
          f" (rounds {min(share):.2f}-{max(share):.2f})")
PY
