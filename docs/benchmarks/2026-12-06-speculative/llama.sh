#!/usr/bin/env bash
# llama.cpp's n-gram speculation on the same requests, side by side.
#   docs/benchmarks/2026-12-06-speculative/llama.sh BRAID LLAMA_SERVER MODEL [ROUNDS]
# Starts llama-server twice on MODEL (2 threads, 16 slots, as docs/PERFORMANCE.md's served
# runs): with `--spec-type ngram-simple` on port 8093 and without on 8094, and braid (speculation
# on, its default) on 8091. Then ROUNDS times (default 2): `braid bench speculative` with
# llama's n-gram server measured and its plain one as the baseline (llama-round-N.json), and
# with braid measured and llama's n-gram server as the baseline (braid-llama-round-N.json).
# summarize.py reads either kind: `python3 summarize.py DIR ROUNDS PREFIX`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
braid=$1 llama=$2 model=$3 rounds=${4:-2}
common=(-m "$model" -t 2 -np 16 -c 32768 --no-cache-prompt --jinja)
"$llama" "${common[@]}" --port 8093 --spec-type ngram-simple >"$here/llama-ngram.log" 2>&1 &
ngram=$!
"$llama" "${common[@]}" --port 8094 >"$here/llama-plain.log" 2>&1 &
plain=$!
"$braid" serve --model "$model" --port 8091 >"$here/braid.log" 2>&1 &
on=$!
trap 'kill $ngram $plain $on 2>/dev/null || true' EXIT
for port in 8091 8093 8094; do
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
done
for r in $(seq 1 "$rounds"); do
  "$braid" bench speculative --url http://127.0.0.1:8093 --baseline-url http://127.0.0.1:8094 \
    --label "llama.cpp ngram-simple, plain as baseline" --seed "$r" --out "$here/tmp" >/dev/null 2>&1
  mv "$here/tmp/speculative.json" "$here/llama-round-$r.json"
  "$braid" bench speculative --url http://127.0.0.1:8091 --baseline-url http://127.0.0.1:8093 \
    --label "braid, llama.cpp ngram-simple as baseline" --seed "$((r + 100))" --out "$here/tmp" >/dev/null 2>&1
  mv "$here/tmp/speculative.json" "$here/braid-llama-round-$r.json"
  rm -r "$here/tmp"
done
echo "llama.cpp ngram-simple / llama.cpp plain:"
python3 "$here/summarize.py" "$here" "$rounds" llama-round
echo "braid (speculation on) / llama.cpp ngram-simple:"
python3 "$here/summarize.py" "$here" "$rounds" braid-llama-round
