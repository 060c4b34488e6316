#!/usr/bin/env bash
# Sampled decoding served, before and after the sampler's vocabulary loops went into vectors:
# each build serves 16 concurrent streamed requests of 192 tokens (ignore_eos), greedy and
# with temperature 0.8 and top_p 0.95, alternating builds within each round; output tokens/s.
#   docs/benchmarks/2026-12-07-sampling/run.sh BEFORE AFTER [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2 rounds=${3:-3}
port=18411
for r in $(seq 1 "$rounds"); do
  for b in before after; do
    bin=${!b}
    "$bin" serve --host 127.0.0.1 --port $port >"$here/server-$b-$r.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
    python3 - "$port" "$b" "$r" >>"$here/results.txt" <<'PY'
import json, sys, threading, time, urllib.request
port, build, rnd = sys.argv[1:]
def one(body, out):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out.append(json.load(r)["usage"]["completion_tokens"])
for name, extra in [("greedy", {"temperature": 0}), ("t0.8 top_p0.95", {"temperature": 0.8, "top_p": 0.95})]:
    body = {"prompt": "Write a long story about a lighthouse keeper.", "max_tokens": 192, "ignore_eos": True, "seed": 1, **extra}
    out = []
    threads = [threading.Thread(target=one, args=(body, out)) for _ in range(16)]
    t = time.monotonic()
    for th in threads: th.start()
    for th in threads: th.join()
    dt = time.monotonic() - t
    print(f"{build} round {rnd} {name}: {sum(out)} tokens in {dt:.2f} s = {sum(out) / dt:.1f} tok/s")
PY
    kill $pid; wait $pid 2>/dev/null || true
  done
done
cat "$here/results.txt"
