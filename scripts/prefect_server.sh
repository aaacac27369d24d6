#!/usr/bin/env bash
# A local Prefect server (and a process worker for the `populora` pool), in the background.
#   scripts/prefect_server.sh start   # server on 127.0.0.1:${PREFECT_PORT:-4200}, then the worker
#   scripts/prefect_server.sh stop    # stops what `start` started (worker first)
# State (SQLite database, logs, pid files) lives in ~/.cache/populora/prefect.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PORT=${PREFECT_PORT:-4200}
STATE=${POPULORA_CACHE:-$HOME/.cache/populora}/prefect
POOL=${POPULORA_POOL:-populora}
mkdir -p "$STATE"
export PREFECT_HOME="$STATE/home" PREFECT_SERVER_ANALYTICS_ENABLED=false HF_HUB_OFFLINE=1
export PREFECT_API_URL="http://127.0.0.1:$PORT/api"

healthy() { "$BIN/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$PREFECT_API_URL/health" 2>/dev/null; }
alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

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

case "${1:-}" in
start)
    if ! alive "$STATE/server.pid"; then
        setsid "$BIN/prefect" server start --host 127.0.0.1 --port "$PORT" >"$STATE/server.log" 2>&1 &
        echo $! >"$STATE/server.pid"
        for _ in $(seq 1 120); do
            healthy && break
            alive "$STATE/server.pid" || { cat "$STATE/server.log"; echo "prefect server failed to start" >&2; exit 1; }
            sleep 0.5
        done
        healthy || { echo "prefect server not healthy on $PORT" >&2; exit 1; }
    fi
    echo "Prefect server: http://127.0.0.1:$PORT (UI), API $PREFECT_API_URL"
    "$BIN/prefect" work-pool inspect "$POOL" >/dev/null 2>&1 || "$BIN/prefect" work-pool create "$POOL" --type process >/dev/null
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
    echo "stopped"
    ;;
*)
    echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
