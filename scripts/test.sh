#!/usr/bin/env bash
# One command: install what is missing, then run the whole test suite (Qt offscreen, no GPU, no downloads).
# Without test paths, the window tests run in their own pytest process after the rest: a long engine session
# (hundreds of models, servers, sandboxes) slows a later QThread-heavy test's worker far beyond its timeouts,
# and one process per layer keeps each layer's tests independent of the other's leftovers.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
ensure_venv
cd "$ROOT"
export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
for arg in "$@"; do
  case "$arg" in
    tests*|*.py|*::*) exec "$VENV/bin/python" -m pytest "$@" ;;
  esac
done
status=0
"$VENV/bin/python" -m pytest "$@" --ignore=tests/ui || status=$?
"$VENV/bin/python" -m pytest "$@" tests/ui || status=$((status > 0 ? status : $?))
exit "$status"
