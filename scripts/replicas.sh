#!/usr/bin/env bash
# Runs N braid replicas on loopback ports behind a router, the way one machine with many cores
# (or several NUMA nodes) is best used: each replica its own engine and KV cache.
#
#   scripts/replicas.sh [--router nginx|vllm-router] [--policy POLICY] N [braid serve flags...]
#
# The router is nginx (the default), sending each new request to the replica with the fewest
# open ones, or vLLM's router (`vllm-router` 0.1.17, installed from PyPI into the project's
# .venv on first use) with its --policy (default cache_aware; round_robin, power_of_two,
# kv_aware, random, consistent_hash). vllm-router's cache_aware asks every replica to render
# each request (/v1/chat/completions/render) and sends it where its prompt was sent before;
# power_of_two polls each replica's /get_load; with kv_aware each replica publishes its KV-cache
# events (--kv-events, on 127.0.0.1:$BRAID_KV_EVENTS_BASE_PORT + i, default the replica's port
# + 1000) and the router, finding them through /get_server_info and /kv_event_sources, sends
# each request where its prompt's blocks really are. Its Prometheus metrics are on 127.0.0.1:
# $BRAID_ROUTER_METRICS_PORT (default 29000), its log in $BRAID_REPLICAS_DIR/router.log.
#
# The router listens on $BRAID_PORT (default 8080, host $BRAID_HOST, default 127.0.0.1); replica i
# listens on 127.0.0.1:$((BRAID_REPLICA_BASE_PORT + i)) (default 8081, 8082, ...). Each replica
# gets $BRAID_REPLICA_THREADS compute threads (default: the cores divided among the replicas).
# It stays in the foreground; Ctrl-C or SIGTERM stops nginx, then drains and stops every
# replica. Logs, the nginx config and pids are in $BRAID_REPLICAS_DIR (default a temp dir).
#
# nginx settings for token streaming: least_conn balancing; HTTP/1.1 with keep-alive to the
# replicas; proxy_buffering and proxy_request_buffering off, so each SSE event is passed on as
# soon as it is written; long read/send timeouts (a stream may be silent while its prompt is
# read); a replica that refuses connections is skipped (max_fails) and the request goes to the
# next one. A replica that dies mid-stream cuts its streams: the client sees the connection end
# without `data: [DONE]` (nginx cannot finish an SSE stream it no longer has a source for).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUTER=nginx
POLICY=cache_aware
usage() {
  echo "usage: scripts/replicas.sh [--router nginx|vllm-router] [--policy POLICY] N [braid serve flags...]   (N >= 1 replicas)" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --router) [ $# -ge 2 ] || usage; ROUTER=$2; shift 2 ;;
    --policy) [ $# -ge 2 ] || usage; POLICY=$2; shift 2 ;;
    *) break ;;
  esac
done
case "$ROUTER" in
  nginx | vllm-router) ;;
  *) echo "replicas: unknown --router $ROUTER (nginx or vllm-router)" >&2; exit 2 ;;
esac
N=${1:-}
if ! [[ "$N" =~ ^[1-9][0-9]*$ ]]; then
  usage
fi
shift

HOST=${BRAID_HOST:-127.0.0.1}
PORT=${BRAID_PORT:-8080}
BASE=${BRAID_REPLICA_BASE_PORT:-8081}
BIN=${BRAID_BIN:-target/release/braid}
CORES=$(nproc)
THREADS=${BRAID_REPLICA_THREADS:-$(( CORES / N > 0 ? CORES / N : 1 ))}
RUN=${BRAID_REPLICAS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/braid-replicas.XXXXXX")}
mkdir -p "$RUN/tmp"

VLLM_ROUTER_VERSION=0.1.17
if [ "$ROUTER" = vllm-router ]; then
  if ! .venv/bin/vllm-router --help >/dev/null 2>&1 \
    || ! .venv/bin/pip show vllm-router 2>/dev/null | grep -qx "Version: $VLLM_ROUTER_VERSION"; then
    echo "replicas: installing vllm-router==$VLLM_ROUTER_VERSION into .venv ..." >&2
    [ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check "vllm-router==$VLLM_ROUTER_VERSION"
  fi
elif ! command -v nginx >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "replicas: installing Debian's nginx ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq nginx >/dev/null
  else
    echo "replicas: nginx is not installed; install it (e.g. sudo apt-get install nginx) and retry" >&2
    exit 1
  fi
fi
if [ ! -x "$BIN" ]; then
  echo "replicas: $BIN not found; build it with: cargo build --release" >&2
  exit 1
fi

pids=()
stop() {
  trap - INT TERM EXIT
  rm -f "$RUN/ready"
  if [ -f "$RUN/nginx.pid" ]; then
    kill -QUIT "$(cat "$RUN/nginx.pid")" 2>/dev/null || true
  fi
  if [ -n "${router_pid:-}" ]; then
    kill -TERM "$router_pid" 2>/dev/null || true
  fi
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  # braid drains (up to its --drain-timeout-secs) and exits; never wait forever.
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 400); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  echo "replicas: stopped" >&2
}
trap stop EXIT
trap 'exit 0' INT TERM

upstreams=""
worker_urls=()
EVENTS_BASE=${BRAID_KV_EVENTS_BASE_PORT:-$((BASE + 1000))}
for i in $(seq 0 $((N - 1))); do
  p=$((BASE + i))
  events=()
  if [ "$ROUTER" = vllm-router ] && [ "$POLICY" = kv_aware ]; then
    events=(--kv-events "tcp://127.0.0.1:$((EVENTS_BASE + i))")
  fi
  "$BIN" serve --host 127.0.0.1 --port "$p" --threads "$THREADS" "${events[@]}" "$@" >"$RUN/braid-$i.log" 2>&1 &
  pids+=("$!")
  echo "$!" >"$RUN/braid-$i.pid"
  upstreams+="        server 127.0.0.1:$p max_fails=1 fail_timeout=5s;"$'\n'
  worker_urls+=("http://127.0.0.1:$p")
done

# Waits (up to 2 minutes) until URL answers, or exits saying WHAT stopped, with its log.
wait_until_up() { # WHAT PID LOG URL
  for _ in $(seq 1 600); do
    if ! kill -0 "$2" 2>/dev/null; then
      echo "replicas: $1 exited; its log:" >&2
      tail -n 20 "$3" >&2
      exit 1
    fi
    if curl -fsS -o /dev/null "$4" 2>/dev/null; then
      return
    fi
    sleep 0.2
  done
}

wait_for_replicas() {
  for i in $(seq 0 $((N - 1))); do
    wait_until_up "replica $i" "${pids[$i]}" "$RUN/braid-$i.log" "http://127.0.0.1:$((BASE + i))/health"
  done
}

if [ "$ROUTER" = vllm-router ]; then
  # The router checks each replica's /health once a second: a replica that drains (503) or
  # has exited is out of rotation within a second or two. A request it sent there meanwhile
  # is retried with backoff over about 4 s, longer than that, so it lands on another replica
  # instead of failing.
  wait_for_replicas
  METRICS_PORT=${BRAID_ROUTER_METRICS_PORT:-29000}
  .venv/bin/vllm-router --host "$HOST" --port "$PORT" --worker-urls "${worker_urls[@]}" \
    --policy "$POLICY" --prometheus-host 127.0.0.1 --prometheus-port "$METRICS_PORT" \
    --worker-startup-check-interval 1 --health-check-interval-secs 1 \
    --health-failure-threshold 1 --health-success-threshold 1 \
    --retry-max-retries 8 --retry-initial-backoff-ms 100 --retry-max-backoff-ms 1000 \
    --retry-backoff-multiplier 2 \
    >"$RUN/router.log" 2>&1 &
  router_pid=$!
  echo "$router_pid" >"$RUN/router.pid"
  wait_until_up vllm-router "$router_pid" "$RUN/router.log" "http://$HOST:$PORT/v1/models"
  echo "replicas: $N replicas (ports $BASE..$((BASE + N - 1)), $THREADS threads each) behind vllm-router ($POLICY) on http://$HOST:$PORT, its metrics on 127.0.0.1:$METRICS_PORT; logs in $RUN" >&2
  echo "ready" >"$RUN/ready"
  wait
  exit 0
fi
NGINX=$(command -v nginx)

user_line=""
if [ "$(id -u)" = 0 ]; then
  # Workers drop root; they need the temp dirs.
  user_line="user nobody nogroup;"
  chown -R nobody:nogroup "$RUN/tmp" 2>/dev/null || chmod 1777 "$RUN/tmp"
fi
cat >"$RUN/nginx.conf" <<EOF
$user_line
worker_processes 1;
daemon off;
pid $RUN/nginx.pid;
error_log $RUN/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log $RUN/nginx-access.log;
    client_body_temp_path $RUN/tmp/body;
    proxy_temp_path $RUN/tmp/proxy;
    fastcgi_temp_path $RUN/tmp/fastcgi;
    uwsgi_temp_path $RUN/tmp/uwsgi;
    scgi_temp_path $RUN/tmp/scgi;
    client_max_body_size 8m;

    upstream braid {
        least_conn;
$upstreams        keepalive 64;
    }

    server {
        listen $HOST:$PORT;
        location / {
            proxy_pass http://braid;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
            proxy_connect_timeout 2s;
            # Refused connections and 503s (a replica loading or draining) go to the next
            # replica. Completions have no side effects, so a POST may be retried as long as
            # nothing has been sent to the client yet.
            proxy_next_upstream error timeout http_503 non_idempotent;
            proxy_next_upstream_tries 2;
        }
    }
}
EOF

"$NGINX" -t -q -c "$RUN/nginx.conf" -p "$RUN" 2>>"$RUN/nginx-error.log" || {
  echo "replicas: bad nginx config, see $RUN/nginx-error.log" >&2
  exit 1
}
"$NGINX" -c "$RUN/nginx.conf" -p "$RUN" &

wait_for_replicas
echo "replicas: $N replicas (ports $BASE..$((BASE + N - 1)), $THREADS threads each) behind nginx on http://$HOST:$PORT; logs in $RUN" >&2
echo "ready" >"$RUN/ready"
wait
