#!/usr/bin/env bash
# Installs the Debian packages PopuLoRA needs: bubblewrap for the local sandbox, Debian's
# python3.11 as the interpreter inside it, python3.11-venv where that python cannot make a
# venv; with `docker`, also docker.io for the docker sandbox (`make test`, not `make run`).
# Does nothing when they are already there.
#   scripts/system_deps.sh [docker]
set -euo pipefail
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
if [ "${1:-}" = docker ]; then
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
fi
[ -x /usr/bin/python3.11 ] || need+=(python3.11)
# a stock Debian/Ubuntu python3.11 makes no venv without it (`make` would stop at `python3.11 -m venv`)
python3.11 -c 'import ensurepip' >/dev/null 2>&1 || need+=(python3.11-venv)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "system_deps: missing ${need[*]}; run 'sudo apt-get install -y ${need[*]}'" >&2
  exit 1
fi
echo "system_deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
