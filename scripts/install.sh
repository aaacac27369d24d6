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
# pip's settings as pip reads them (a PIP_* variable over [install] over [global], one source per
# key; values split on whitespace), e.g. `find-links=/opt/wheels`, each turned into uv's option
while IFS=$'\t' read -r key value; do
  case $key in
    find-links) args+=(--find-links "$value") ;;
    index-url) args+=(--default-index "$value") ;;
    extra-index-url) args+=(--index "$value") ;;
    constraint) args+=(--constraint "$value") ;;
    no-index) args+=(--no-index) ;;
    cert) export SSL_CERT_FILE="$value" ;;
  esac
done < <("$venv/bin/pip" config list 2>/dev/null | "$venv/bin/python" -c '
import ast, sys
rank = {":env:": 0, "install": 1, "global": 2}
best = {}
for line in sys.stdin:
    name, _, raw = line.rstrip("\n").partition("=")
    section, _, key = name.rpartition(".")
    if section not in rank or not raw:
        continue
    if key not in best or rank[section] < best[key][0]:
        best[key] = (rank[section], ast.literal_eval(raw))
for key, (_, value) in best.items():
    if key == "no-index":
        if value.lower() in ("1", "true", "yes", "on"):
            print(f"{key}\t1")
        continue
    for v in value.split():
        print(f"{key}\t{v}")
' || true)
export UV_CACHE_DIR=${UV_CACHE_DIR:-$HOME/.cache/populora/uv}
if ! "$venv/bin/uv" pip install -q "${args[@]}" "$@"; then
  echo "install: uv could not install $* (above); installing with pip instead" >&2
  "$venv/bin/pip" install -q "$@"
fi
