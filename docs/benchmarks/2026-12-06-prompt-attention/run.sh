#!/usr/bin/env bash
# Prompt attention before and after the register-blocked passes, side by side on one machine.
#   docs/benchmarks/2026-12-06-prompt-attention/run.sh BEFORE_BRAID AFTER_BRAID [ROUNDS]
# Alternates the two binaries ROUNDS times (default 5): `braid bench-engine` with a 4,096-token
# context (prefill 512/2,048/4,096; decode 1 and 16 sequences at 4k) and with a 128-token one
# (decode 1 and 16), each report to a JSON file here, then prints the medians.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 rounds=${3:-5}
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    bin=$before; [ "$side" = after ] && bin=$after
    "$bin" bench-engine --batch 1,16 --context 4096 --decode-steps 64 --json >"$here/$side-long-$r.json"
    "$bin" bench-engine --prompt-tokens 512 --batch 1,16 --context 128 --decode-steps 200 --json >"$here/$side-short-$r.json"
  done
done
python3 - "$here" "$rounds" <<'PY'
import json, statistics, sys
here, rounds = sys.argv[1], int(sys.argv[2])
def runs(side, kind):
    return [json.load(open(f"{here}/{side}-{kind}-{r}.json")) for r in range(1, rounds + 1)]
def fmt(xs):
    return f"{statistics.median(xs):.0f} ({min(xs):.0f}–{max(xs):.0f})"
for side in ("before", "after"):
    long, short = runs(side, "long"), runs(side, "short")
    pre = {p["prompt_tokens"]: [] for p in long[0]["prefill"]}
    for r in long:
        for p in r["prefill"]:
            pre[p["prompt_tokens"]].append(p["tokens_per_sec"])
    dec = lambda rs, n: [d[1] for r in rs for d in r["decode"] if d[0] == n]
    ratio = statistics.median(pre[4096]) / statistics.median(pre[512])
    cells = [fmt(pre[n]) for n in (512, 2048, 4096)] + [f"{ratio:.2f}"]
    cells += [fmt(dec(short, 1)), fmt(dec(short, 16)), fmt(dec(long, 1)), fmt(dec(long, 16))]
    print(f"| {side} | " + " | ".join(cells) + " |")
PY
