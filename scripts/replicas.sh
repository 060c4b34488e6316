#!/usr/bin/env bash
# Runs N braid replicas on loopback ports behind nginx, the way one machine with many cores (or
# several NUMA nodes) is best used: each replica its own engine and KV cache, nginx sending each
# new request to the replica with the fewest open ones.
#
#   scripts/replicas.sh N [braid serve flags...]
#
# nginx listens on $BRAID_PORT (default 8080, host $BRAID_HOST, default 127.0.0.1); replica i
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

N=${1:-}
if ! [[ "$N" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/replicas.sh N [braid serve flags...]   (N >= 1 replicas)" >&2
  exit 2
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

if ! command -v nginx >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "replicas: installing Debian's nginx ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq nginx >/dev/null
  else
    echo "replicas: nginx is not installed; install it (e.g. sudo apt-get install nginx) and retry" >&2
    exit 1
  fi
fi
NGINX=$(command -v nginx)
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
for i in $(seq 0 $((N - 1))); do
  p=$((BASE + i))
  "$BIN" serve --host 127.0.0.1 --port "$p" --threads "$THREADS" "$@" >"$RUN/braid-$i.log" 2>&1 &
  pids+=("$!")
  echo "$!" >"$RUN/braid-$i.pid"
  upstreams+="        server 127.0.0.1:$p max_fails=1 fail_timeout=5s;"$'\n'
done

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

for i in $(seq 0 $((N - 1))); do
  p=$((BASE + i))
  for _ in $(seq 1 600); do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      echo "replicas: replica $i exited; its log:" >&2
      tail -n 20 "$RUN/braid-$i.log" >&2
      exit 1
    fi
    if curl -fsS -o /dev/null "http://127.0.0.1:$p/health" 2>/dev/null; then
      break
    fi
    sleep 0.2
  done
done
echo "replicas: $N replicas (ports $BASE..$((BASE + N - 1)), $THREADS threads each) behind nginx on http://$HOST:$PORT; logs in $RUN" >&2
echo "ready" >"$RUN/ready"
wait
