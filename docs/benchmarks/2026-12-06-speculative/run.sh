#!/usr/bin/env bash
# Speculative decoding on and off, side by side on one machine.
#   docs/benchmarks/2026-12-06-speculative/run.sh BRAID MODEL [ROUNDS]
# Starts `braid serve` twice on MODEL (speculation on, on port 8091; `--speculative off`, on
# 8092), then alternates `braid bench speculative` between them ROUNDS times (default 5; odd
# rounds on first, even rounds off first), each report to a JSON file here, and prints per group
# the medians of both and of the ratio on/off of each round. Both servers run all the time, so
# each round sees the same background; only one is loaded at a time. Random text is measured
# more tightly, request by request, by random_ab.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1 model=$2 rounds=${3:-5}
"$bin" serve --model "$model" --port 8091 >"$here/on.log" 2>&1 &
on=$!
"$bin" serve --model "$model" --port 8092 --speculative off >"$here/off.log" 2>&1 &
off=$!
trap 'kill $on $off 2>/dev/null || true' EXIT
for port in 8091 8092; do
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
done
for r in $(seq 1 "$rounds"); do
  sides="on off"; [ $((r % 2)) = 0 ] && sides="off on"
  for side in $sides; do
    port=8091; [ "$side" = off ] && port=8092
    "$bin" bench speculative --url "http://127.0.0.1:$port" --label "$side" --seed "$r" \
      --out "$here/$side-$r" >/dev/null 2>&1
  done
done
python3 - "$here" "$rounds" <<'PY'
import json, statistics, sys
here, rounds = sys.argv[1], int(sys.argv[2])
def groups(side, r):
    rep = json.load(open(f"{here}/{side}-{r}/speculative.json"))
    return {g["name"]: g["aggregate"] for g in rep["groups"]}
on = [groups("on", r) for r in range(1, rounds + 1)]
off = [groups("off", r) for r in range(1, rounds + 1)]
def decode_rate(agg):
    # Tokens per second of decoding: 1000 / TPOT (the prompt's time left out).
    return 1000 / agg["tpot_ms"]["p50"]
print("| group | on tok/s | off tok/s | on/off (median of rounds) | on decode tok/s | off decode tok/s | on/off | ITL p99 on / off (ms) |")
print("|---|---|---|---|---|---|---|---|")
for name in on[0]:
    t_on = [g[name]["throughput_tok_s"] for g in on]
    t_off = [g[name]["throughput_tok_s"] for g in off]
    d_on = [decode_rate(g[name]) for g in on]
    d_off = [decode_rate(g[name]) for g in off]
    ratio = [a / b for a, b in zip(t_on, t_off)]
    dratio = [a / b for a, b in zip(d_on, d_off)]
    itl_on = statistics.median(g[name]["itl_ms"]["p99"] for g in on)
    itl_off = statistics.median(g[name]["itl_ms"]["p99"] for g in off)
    m = statistics.median
    print(f"| {name} | {m(t_on):.0f} | {m(t_off):.0f} | {m(ratio):.2f} ({min(ratio):.2f}–{max(ratio):.2f}) "
          f"| {m(d_on):.0f} | {m(d_off):.0f} | {m(dratio):.2f} ({min(dratio):.2f}–{max(dratio):.2f}) | {itl_on:.0f} / {itl_off:.0f} |")
# The prediction's gain over plain decoding without one: edit+prediction on, against edit off.
p = [a["edit+prediction"]["throughput_tok_s"] / b["edit"]["throughput_tok_s"] for a, b in zip(on, off)]
print(f"\nedit+prediction (on) / edit (off): {statistics.median(p):.2f} ({min(p):.2f}–{max(p):.2f})")
PY
