#!/usr/bin/env bash
# Speculative decoding on and off, side by side on one machine.
#   docs/benchmarks/2026-12-06-speculative/run.sh BRAID MODEL [ROUNDS]
# Starts `braid serve` twice on MODEL (speculation on, on port 8091; `--speculative off`, on
# 8092), then runs `braid bench speculative --url ON --baseline-url OFF` ROUNDS times (default
# 3; a new --seed each), each report to round-N.json here. The bench sends every request to
# both servers one after the other, alternating which goes first, so each pair sees the same
# moment of a noisy machine. Prints per group, over every pair of every round, the median (and
# quartiles) of the ratio on/off of the decode rate (tokens after the first over the time since
# the first) and of the output rate (tokens over the request's whole time, its prompt included).
# ON_ARGS adds flags to the first server (ON_ARGS="--draft-model GGUF" times a draft model), and
# PREFIX names the reports (default `round`).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1 model=$2 rounds=${3:-3}
prefix=${PREFIX:-round}
# shellcheck disable=SC2086 # ON_ARGS is a list of flags
"$bin" serve --model "$model" --port 8091 ${ON_ARGS:-} >"$here/on.log" 2>&1 &
on=$!
"$bin" serve --model "$model" --port 8092 --speculative off >"$here/off.log" 2>&1 &
off=$!
trap 'kill $on $off 2>/dev/null || true' EXIT
for port in 8091 8092; do
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
done
for r in $(seq 1 "$rounds"); do
  "$bin" bench speculative --url http://127.0.0.1:8091 --baseline-url http://127.0.0.1:8092 \
    --label "on, off as baseline" --seed "$r" --out "$here/$prefix-$r" >/dev/null 2>&1
  mv "$here/$prefix-$r/speculative.json" "$here/$prefix-$r.json"
  rm -r "$here/$prefix-$r"
done
curl -s http://127.0.0.1:8091/metrics | grep '^braid_spec_decode' >"$here/$prefix-on-metrics.txt"
python3 "$here/summarize.py" "$here" "$rounds" "$prefix"
