#!/usr/bin/env bash
# Scoring a prompt served, before and after the logprobs' loops went into vectors: a 1,000-word
# prompt with echo and 5 logprobs per token (what lm-evaluation-harness's loglikelihood asks),
# five requests one after another per build and round, builds alternating; seconds per request.
#   docs/benchmarks/2026-12-07-sampling/score.sh BEFORE AFTER [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 rounds=${3:-3}
port=18412
for r in $(seq 1 "$rounds"); do
  for b in before after; do
    bin=${!b}
    "$bin" serve --host 127.0.0.1 --port $port >"$here/score-server-$b-$r.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
    python3 - "$port" "$b" "$r" >>"$here/score-results.txt" <<'PY'
import json, statistics, sys, time, urllib.request
port, build, rnd = sys.argv[1:]
words = "the keeper climbed the stairs of the old lighthouse every evening and lit the lamp".split()
prompt = " ".join(words[i % len(words)] for i in range(1000))
times, tokens = [], 0
for _ in range(5):
    body = {"prompt": prompt, "max_tokens": 1, "echo": True, "logprobs": 5, "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as resp:
        tokens = json.load(resp)["usage"]["prompt_tokens"]
    times.append(time.monotonic() - t)
print(f"{build} round {rnd}: {tokens} prompt tokens scored, median {statistics.median(times):.3f} s of 5")
PY
    kill $pid; wait $pid 2>/dev/null || true
  done
done
cat "$here/score-results.txt"
