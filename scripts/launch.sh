#!/usr/bin/env bash
# One command: install what is missing, then open AZR Model Trainer (bundled sample corpus + tiny preset).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
[ "$(uname -s)" = Linux ] && apt_install_missing gui
ensure_venv
if [ "$(uname -s)" = Linux ] && [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ -z "${QT_QPA_PLATFORM:-}" ]; then
  if command -v xvfb-run >/dev/null 2>&1; then
    log "no display found: opening the window on a virtual screen (Xvfb); Ctrl+C to quit"
    exec xvfb-run -a -s "-screen 0 1280x800x24" "$VENV/bin/python" -m desktop_app "$@"
  fi
  log "no display found and no xvfb-run: set DISPLAY or QT_QPA_PLATFORM=offscreen"; exit 1
fi
exec "$VENV/bin/python" -m desktop_app "$@"
