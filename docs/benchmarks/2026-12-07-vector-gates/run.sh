#!/usr/bin/env bash
# The build before the vectorized gates, norms and bf16 operands against the one with them,
# alternating: five fresh 512-token prompts per run (the first also pays for first-touch page
# faults), one of 2,048 and one of 4,096 tokens, and decode of 1 and 16 sequences.
#   docs/benchmarks/2026-12-07-vector-gates/run.sh BEFORE AFTER [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 rounds=${3:-3}
prompts=()
for _ in 1 2 3 4 5; do prompts+=(--prompt-tokens 512); done
for r in $(seq 1 "$rounds"); do
  for b in before after; do
    bin=${!b}
    "$bin" bench-engine "${prompts[@]}" --prompt-tokens 2048 --prompt-tokens 4096 --batch 1 --batch 16 \
      --decode-steps 32 --json >"$here/$b-$r.json"
  done
done
python3 - "$here" "$rounds" <<'PY'
import json, statistics, sys
here, rounds = sys.argv[1], int(sys.argv[2])
print("| build | round | prefill 512 (median of 5) | prefill 2,048 | prefill 4,096 | 4,096 ÷ 512 | decode 1 | decode 16 |")
print("|---|---|---|---|---|---|---|---|")
for r in range(1, rounds + 1):
    for b in ("before", "after"):
        j = json.load(open(f"{here}/{b}-{r}.json"))
        rate = lambda n: [p["tokens_per_sec"] for p in j["prefill"] if p["prompt_tokens"] == n]
        p512 = statistics.median(rate(512))
        p2k, p4k = rate(2048)[0], rate(4096)[0]
        dec = {d[0]: d[1] for d in j["decode"]}
        print(f"| {b} | {r} | {p512:.0f} | {p2k:.0f} | {p4k:.0f} | {p4k / p512:.2f} | {dec[1]:.1f} | {dec[16]:.1f} |")
PY
