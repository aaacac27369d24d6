#!/usr/bin/env bash
# A local Prefect server (and a process worker for the `populora` pool), in the background.
#   scripts/prefect_server.sh start   # server on 127.0.0.1:${PREFECT_PORT:-4200}, then the worker
#   scripts/prefect_server.sh stop    # stops what `start` started on that port (worker first)
# State (SQLite database, logs, pid files) is kept per port, in
# ~/.cache/populora/prefect/port-$PREFECT_PORT: servers on two ports run side by side, and
# `stop` stops only the one of its port. A port taken by anything else is refused.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PORT=${PREFECT_PORT:-4200}
BASE=${POPULORA_CACHE:-$HOME/.cache/populora}/prefect
STATE=$BASE/port-$PORT
POOL=${POPULORA_POOL:-populora}
mkdir -p "$STATE"
# the database of the old layout (one state for every port) becomes the default port's
if [[ $PORT == 4200 && -d $BASE/home && ! -e $STATE/home ]] && ! kill -0 "$(cat "$BASE/server.pid" 2>/dev/null)" 2>/dev/null; then
    mv "$BASE/home" "$STATE/home"
fi
export PREFECT_HOME="$STATE/home" PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1
export PREFECT_API_URL="http://127.0.0.1:$PORT/api"

healthy() { "$BIN/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$PREFECT_API_URL/health" 2>/dev/null; }
# a pid file whose process is alive and is still a prefect process (not a reused pid)
alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null && grep -qa prefect "/proc/$(cat "$1")/cmdline" 2>/dev/null; }
listening() { "$BIN/python" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()' "$PORT" 2>/dev/null; }
listener() {  # what listens on the port, as "pid N: command line", when ss can tell
    local pid
    pid=$(ss -Hltnp "sport = :$PORT" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)
    if [[ -n $pid ]]; then echo "pid $pid: $(ps -o args= -p "$pid" | cut -c1-200)"; else echo "a process this user cannot see"; fi
}

stop_one() {  # pidfile: SIGTERM twice (a Prefect worker needs two), then SIGKILL
    local pidfile=$1
    if alive "$pidfile"; then
        local pid; pid=$(cat "$pidfile")
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        sleep 1; kill -TERM -- "-$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

start_server() {
    if listening; then
        echo "port $PORT is taken by $(listener), not by a server started from $STATE;" \
            "stop it, or choose another port: PREFECT_PORT=<port> $0 start" >&2
        exit 1
    fi
    setsid "$BIN/prefect" server start --host 127.0.0.1 --port "$PORT" >"$STATE/server.log" 2>&1 &
    echo $! >"$STATE/server.pid"
}

case "${1:-}" in
start)
    alive "$STATE/server.pid" || start_server
    for _ in $(seq 1 120); do
        healthy && break
        alive "$STATE/server.pid" || { cat "$STATE/server.log"; echo "prefect server failed to start" >&2; exit 1; }
        sleep 0.5
    done
    healthy || { echo "prefect server (pid $(cat "$STATE/server.pid")) not healthy on $PORT; log: $STATE/server.log" >&2; exit 1; }
    echo "Prefect server: http://127.0.0.1:$PORT (UI), API $PREFECT_API_URL (log: $STATE/server.log)"
    "$BIN/prefect" work-pool inspect "$POOL" >/dev/null 2>&1 || "$BIN/prefect" work-pool create "$POOL" --type process >/dev/null
    # a run whose process died shows Crashed once its heartbeats stop (flows/automations.py)
    "$BIN/python" -m flows.automations || echo "warning: the crash automation was not registered (flows/automations.py)" >&2
    if ! alive "$STATE/worker.pid"; then
        setsid "$BIN/prefect" worker start --pool "$POOL" >"$STATE/worker.log" 2>&1 &
        echo $! >"$STATE/worker.pid"
    fi
    echo "worker for pool '$POOL' running (log: $STATE/worker.log)"
    echo "export PREFECT_API_URL=$PREFECT_API_URL"
    ;;
stop)
    stop_one "$STATE/worker.pid"
    stop_one "$STATE/server.pid"
    echo "stopped the server and worker of port $PORT"
    ;;
*)
    echo "usage: [PREFECT_PORT=4200] $0 start|stop" >&2; exit 2 ;;
esac
