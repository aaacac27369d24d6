#!/usr/bin/env bash
# Installs packages into a virtual environment with uv (a fresh .venv in ~20 s where pip took
# minutes: docs/benchmarks.md#make-run), honouring pip's own settings on this machine, so a
# local wheel directory, extra indexes and constraints apply as they would to pip.
#
#   scripts/install.sh VENV PACKAGE...     e.g. scripts/install.sh .venv -e '.[dev,bench]'
#
# uv itself comes from PyPI into the venv (pinned). POPULORA_PIP=1 uses pip instead, as does a
# failed uv install (said on stderr).
set -euo pipefail
venv=$1
shift
UV_VERSION=0.13.8
if [ "${POPULORA_PIP:-0}" = 1 ]; then
  exec "$venv/bin/pip" install -q "$@"
fi
"$venv/bin/pip" install -q "uv==$UV_VERSION" || exec "$venv/bin/pip" install -q "$@"
args=(--python "$venv/bin/python" --index-strategy unsafe-best-match)
# pip's settings (pip.conf and PIP_* variables), e.g. `find-links=/opt/wheels`: key='v1 v2'
while IFS= read -r line; do
  key=${line%%=*}
  key=${key##*.}
  values=${line#*=}
  values=${values//\'/}
  for v in $values; do
    case $key in
      find-links) args+=(--find-links "$v") ;;
      index-url) args+=(--default-index "$v") ;;
      extra-index-url) args+=(--index "$v") ;;
      constraint) args+=(--constraint "$v") ;;
      cert) export SSL_CERT_FILE="$v" ;;
    esac
  done
done < <("$venv/bin/pip" config list 2>/dev/null || true)
export UV_CACHE_DIR=${UV_CACHE_DIR:-$HOME/.cache/populora/uv}
if ! "$venv/bin/uv" pip install -q "${args[@]}" "$@"; then
  echo "install: uv could not install $* (above); installing with pip instead" >&2
  "$venv/bin/pip" install -q "$@"
fi
