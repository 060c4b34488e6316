#!/usr/bin/env bash
# Soak test: starts `braid serve` on the real model, keeps it under load for a while with oha
# (32 connections: completions and chat, streaming and not), samples its memory and metrics,
# then reports non-2xx answers, RSS growth after warm-up, and ITL p99 per window.
#
#   scripts/soak.sh                              # 10 minutes, 32 connections
#   scripts/soak.sh --duration 60 --warmup 15 --interval 5   # the CI variant (tests/e2e/test_soak.py)
#
# Options: --duration SECS (600)  --connections N (32, split over four request kinds)
#          --warmup SECS (60: RSS growth is measured from here to the end)
#          --interval SECS (30: sampling and ITL window)  --out FILE (JSON summary)
#          -- ARGS...   extra `braid serve` flags
# Env: BRAID_BIN (target/release/braid), BRAID_MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf).
# Exits 1 when a bound is broken: any non-2xx other than 429, any client error (timeout,
# reset), RSS growth >= 5% from warm-up to the end, or an ITL p99 over the second half of the
# run (after warm-up) more than 1.5x the first half's.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=600 CONNECTIONS=32 WARMUP=60 INTERVAL=30 OUT=""
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --interval) INTERVAL=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "soak.sh: unknown option $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
if [ $((CONNECTIONS % 4)) -ne 0 ] || [ "$CONNECTIONS" -lt 4 ]; then
  echo "soak.sh: --connections must be a multiple of 4" >&2; exit 2
fi
if [ "$WARMUP" -ge "$DURATION" ]; then
  echo "soak.sh: --warmup must be shorter than --duration" >&2; exit 2
fi

BIN=${BRAID_BIN:-target/release/braid}
MODEL=${BRAID_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
export PATH="$HOME/.cargo/bin:$PATH"
OHA=$(command -v oha || true)
[ -x "$BIN" ] || { echo "soak.sh: $BIN not found; run cargo build --release" >&2; exit 2; }
[ -n "$OHA" ] || { echo "soak.sh: oha not found; run scripts/install-test-tools.sh" >&2; exit 2; }
PY=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )

WORK=$(mktemp -d "${TMPDIR:-/tmp}/braid-soak.XXXXXX")
PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT"
"$BIN" serve --host 127.0.0.1 --port "$PORT" --model "$MODEL" "${EXTRA[@]}" >"$WORK/braid.log" 2>&1 &
PID=$!
OHA_PIDS=()
cleanup() {
  for p in "${OHA_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  kill -TERM "$PID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$PID" 2>/dev/null || true
}
trap cleanup EXIT

for _ in $(seq 1 900); do
  if curl -sf "$URL/health" >/dev/null 2>&1; then break; fi
  kill -0 "$PID" 2>/dev/null || { echo "soak.sh: braid exited:"; tail -20 "$WORK/braid.log"; exit 1; }
  sleep 0.2
done
curl -sf "$URL/health" >/dev/null || { echo "soak.sh: braid not ready"; exit 1; }

PER=$((CONNECTIONS / 4))
CHAT_MSG='[{"role":"user","content":"Write a short story about a lighthouse keeper."}]'
run_oha() { # name path body
  "$OHA" -z "${DURATION}s" -c "$PER" --no-tui --output-format json --wait-ongoing-requests-after-deadline \
    -t 120s -m POST -H "content-type: application/json" -d "$3" "$URL$2" >"$WORK/oha-$1.json" 2>"$WORK/oha-$1.err" &
  OHA_PIDS+=($!)
}
echo "soak: $CONNECTIONS connections for ${DURATION}s against braid (pid $PID) on $URL; samples every ${INTERVAL}s in $WORK"
run_oha completions-stream /v1/completions '{"prompt":"Once upon a time, in a quiet village by the sea,","max_tokens":64,"temperature":0.8,"stream":true}'
run_oha completions /v1/completions '{"prompt":"The history of the printing press","max_tokens":32,"temperature":0.7}'
run_oha chat-stream /v1/chat/completions "{\"messages\":$CHAT_MSG,\"max_tokens\":64,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"
run_oha chat /v1/chat/completions "{\"messages\":$CHAT_MSG,\"max_tokens\":32,\"temperature\":0}"

# Sample RSS and /metrics every INTERVAL seconds until the load ends.
START=$(date +%s.%N)
: >"$WORK/samples.jsonl"
sample() {
  local t rss
  t=$($PY -c "import time; print(round(time.time() - $START, 1))")
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$PID/status")
  curl -sf "$URL/metrics" >"$WORK/metrics.txt" || : >"$WORK/metrics.txt"
  $PY - "$t" "$rss" "$WORK/metrics.txt" >>"$WORK/samples.jsonl" <<'EOF'
import json, re, sys
t, rss, path = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
itl, counters = {}, {}
for line in open(path):
    m = re.match(r'braid_inter_token_latency_seconds_bucket\{le="([^"]+)"\} (\S+)', line)
    if m:
        itl[m.group(1)] = float(m.group(2))
    m = re.match(r'(braid_generation_tokens_total|braid_request_errors_total\{[^}]*\}|braid_request_success_total\{[^}]*\}) (\S+)', line)
    if m:
        counters[m.group(1)] = float(m.group(2))
print(json.dumps({"t": t, "rss_kib": rss, "itl_buckets": itl, "counters": counters}))
EOF
}
NEXT=$INTERVAL
while :; do
  running=0
  for p in "${OHA_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
  [ $running -eq 1 ] || break
  now=$($PY -c "import time; print(int(time.time() - $START))")
  if [ "$now" -ge "$NEXT" ]; then
    sample
    NEXT=$((NEXT + INTERVAL))
  fi
  sleep 0.5
done
sample
for p in "${OHA_PIDS[@]}"; do wait "$p" || true; done
OHA_PIDS=()

$PY - "$WORK" "$DURATION" "$WARMUP" "$CONNECTIONS" "$OUT" <<'EOF'
import json, os, platform, sys
work, duration, warmup, connections, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
samples = [json.loads(l) for l in open(os.path.join(work, "samples.jsonl")) if l.strip()]

def p99(buckets_a, buckets_b):
    """p99 of the observations between two cumulative histogram snapshots (linear in a bucket)."""
    edges = sorted((float(k) if k != "+Inf" else float("inf"), k) for k in buckets_b)
    counts = [(e, buckets_b[k] - buckets_a.get(k, 0.0)) for e, k in edges]
    total = counts[-1][1] if counts else 0
    if total <= 0:
        return None
    target, prev_edge, prev_count = 0.99 * total, 0.0, 0.0
    for edge, c in counts:
        if c >= target:
            if edge == float("inf"):
                return prev_edge
            return prev_edge + (edge - prev_edge) * (target - prev_count) / max(c - prev_count, 1e-9)
        prev_edge, prev_count = edge, c
    return prev_edge

statuses, errors, requests_total = {}, {}, 0
for name in ("completions-stream", "completions", "chat-stream", "chat"):
    try:
        rep = json.load(open(os.path.join(work, f"oha-{name}.json")))
    except Exception as e:  # oha failed to run: count it as an error
        errors[f"{name}: no report ({e})"] = 1
        continue
    for code, n in rep.get("statusCodeDistribution", {}).items():
        statuses[code] = statuses.get(code, 0) + n
        requests_total += n
    for err, n in (rep.get("errorDistribution") or {}).items():
        errors[f"{name}: {err}"] = errors.get(f"{name}: {err}", 0) + n

non_2xx = {c: n for c, n in statuses.items() if not c.startswith("2")}
bad = {c: n for c, n in non_2xx.items() if c != "429"}
base = next((s for s in samples if s["t"] >= warmup), samples[0])
end = samples[-1]
growth = (end["rss_kib"] - base["rss_kib"]) / base["rss_kib"]
windows, prev = [], {"itl_buckets": {}, "t": 0.0}
for s in samples:
    q = p99(prev["itl_buckets"], s["itl_buckets"])
    if q is not None and s["t"] - prev["t"] > 0.5:
        windows.append({"until_s": s["t"], "itl_p99_ms": round(q * 1000, 1)})
    prev = s
overall = p99({}, end["itl_buckets"])
gen = end["counters"].get("braid_generation_tokens_total", 0.0)
# Steady: the ITL p99 of the second half of the run after warm-up against the first half's.
mid_t = (base["t"] + end["t"]) / 2
mid = min(samples, key=lambda s: abs(s["t"] - mid_t))
first = p99(base["itl_buckets"], mid["itl_buckets"]) or 0.0
last = p99(mid["itl_buckets"], end["itl_buckets"]) or 0.0
summary = {
    "duration_s": duration,
    "connections": connections,
    "requests": requests_total,
    "status_codes": statuses,
    "non_2xx": non_2xx,
    "client_errors": errors,
    "rss_kib_at_warmup": base["rss_kib"],
    "rss_warmup_at_s": base["t"],
    "rss_kib_at_end": end["rss_kib"],
    "rss_growth_pct": round(growth * 100, 2),
    "itl_p99_ms_overall": round(overall * 1000, 1) if overall else None,
    "itl_p99_ms_by_window": windows,
    "itl_p99_ms_first_half": round(first * 1000, 1),
    "itl_p99_ms_second_half": round(last * 1000, 1),
    "output_tokens_per_s": round(gen / duration, 1),
    "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
}
checks = {
    "no non-2xx besides 429": not bad,
    "no client errors (timeouts, resets)": not errors,
    "RSS growth after warm-up < 5%": growth < 0.05,
    "ITL p99 steady (second half <= 1.5x the first)": last <= 1.5 * first,
}
summary["checks"] = checks
print(json.dumps(summary, indent=2))
for name, ok in checks.items():
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
if out:
    json.dump(summary, open(out, "w"), indent=2)
sys.exit(0 if all(checks.values()) else 1)
EOF
