#!/usr/bin/env bash
# The KV cache change (05658df) side by side with the build before it (e2040a2), one machine.
#   docs/benchmarks/2026-12-06-kv-cache/run.sh BEFORE_BRAID AFTER_BRAID [ROUNDS]
# Each round, in turn:
# - prefill 512/2,048/4,096 with both binaries (the KV write and the prefetch changed);
# - decode of 1 and 16 sequences at a 4,096-token context with AFTER, f16 then q8_0. BEFORE's
#   bench-engine shared one context among the sequences (which a 260 MB L3 then serves from
#   cache), so its decode figures at 4k measure something else and are not compared.
# Reports go to JSON files here; the medians are printed as Markdown rows.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 rounds=${3:-3}
for r in $(seq 1 "$rounds"); do
  "$before" bench-engine --batch 1 --context 16 --decode-steps 4 --json >"$here/prefill-before-$r.json"
  "$after" bench-engine --batch 1 --context 16 --decode-steps 4 --json >"$here/prefill-after-$r.json"
  for dtype in f16 q8_0; do
    "$after" bench-engine --prompt-tokens 16 --batch 1,16 --context 4096 --decode-steps 64 \
      --kv-cache-dtype "$dtype" --json >"$here/decode4k-$dtype-$r.json"
  done
done
python3 - "$here" "$rounds" <<'PY'
import json, statistics, sys
here, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: [json.load(open(f"{here}/{name}-{r}.json")) for r in range(1, rounds + 1)]
fmt = lambda xs: f"{statistics.median(xs):.0f} ({min(xs):.0f}–{max(xs):.0f})"
print("| build | prefill 512 | prefill 2,048 | prefill 4,096 | 4,096 ÷ 512 (median of rounds) |")
for side in ("before", "after"):
    rs = load(f"prefill-{side}")
    pre = lambda n: [p["tokens_per_sec"] for r in rs for p in r["prefill"] if p["prompt_tokens"] == n]
    ratio = statistics.median([p["rate_vs_first"] for r in rs for p in r["prefill"] if p["prompt_tokens"] == 4096])
    print(f"| {side} | {fmt(pre(512))} | {fmt(pre(2048))} | {fmt(pre(4096))} | {ratio:.2f} |")
print()
print("| KV cache | decode 1 @4k | decode 16 @4k |")
for dtype in ("f16", "q8_0"):
    rs = load(f"decode4k-{dtype}")
    dec = lambda n: [d[1] for r in rs for d in r["decode"] if d[0] == n]
    print(f"| {dtype} | {fmt(dec(1))} | {fmt(dec(16))} |")
f16, q8 = load("decode4k-f16"), load("decode4k-q8_0")
for n in (1, 16):
    ratios = [[d[1] for d in b["decode"] if d[0] == n][0] / [d[1] for d in a["decode"] if d[0] == n][0] for a, b in zip(f16, q8)]
    print(f"q8_0 / f16 at {n} sequences, per round: " + ", ".join(f"{x:.2f}" for x in ratios))
PY
