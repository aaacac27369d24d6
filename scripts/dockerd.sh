#!/usr/bin/env bash
# Starts or stops a Docker engine for the docker sandbox backend.
#   scripts/dockerd.sh start   start dockerd in the background unless one answers
#   scripts/dockerd.sh stop    stop the dockerd that 'start' started (never another)
# The flags leave the host's network alone: no bridge, no iptables rules.
set -euo pipefail
state="${POPULORA_CACHE:-$HOME/.cache/populora}"
mkdir -p "$state"
pidfile="$state/dockerd.pid"
case "${1:-}" in
  start)
    if docker info >/dev/null 2>&1; then
      echo "dockerd: an engine already answers"
      exit 0
    fi
    command -v dockerd >/dev/null || { echo "dockerd: not installed; run 'scripts/system_deps.sh docker'" >&2; exit 1; }
    nohup dockerd --bridge=none --iptables=false --ip6tables=false --ip-forward=false \
      --ip-masq=false --pidfile "$state/dockerd.engine.pid" >"$state/dockerd.log" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 1 120); do
      if docker info >/dev/null 2>&1; then
        echo "dockerd: started (pid $(cat "$pidfile"), log $state/dockerd.log)"
        exit 0
      fi
      sleep 0.5
    done
    echo "dockerd: did not answer within 60 s; see $state/dockerd.log" >&2
    tail -5 "$state/dockerd.log" >&2 || true
    exit 1
    ;;
  stop)
    [ -f "$pidfile" ] || exit 0
    pid=$(cat "$pidfile")
    rm -f "$pidfile"
    if kill -0 "$pid" 2>/dev/null; then
      docker ps -q --filter name=populora-sbx- | xargs -r docker kill >/dev/null 2>&1 || true
      kill "$pid"
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || { echo "dockerd: stopped"; exit 0; }; sleep 0.5; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
