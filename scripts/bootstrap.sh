#!/usr/bin/env bash
# Installs whatever is missing into ./.venv (sourced by scripts/launch.sh and scripts/test.sh).
# - torch is installed FIRST and pinned (TORCH_SPEC, default torch==2.13.0): an unpinned resolve can pull a
#   multi-GB CUDA build. Set TORCH_SPEC (and PIP_EXTRA_INDEX_URL) yourself for a CUDA build.
# - the project, its test extras, the documents extra (PDF, EPUB, DOCX, HTML, tables) and the tracking extra
#   (TensorBoard, MLflow's client, W&B: +25 s and ~200 MB, so the tracking tests run in CI) and the sweep extra
#   (Optuna, for the sweep tests) next; torch must not move.
# - re-runs are fast: pip only runs again when pyproject.toml changed (stamp file in .venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AZR_VENV:-$ROOT/.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
PY="${PYTHON:-python3}"
log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# Debian/Ubuntu packages. $1 = "gui" adds what a real (X11) Qt window needs.
apt_install_missing() {
  command -v dpkg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 || return 0
  local wanted=(python3-venv)
  if [ "${1:-}" = gui ]; then
    wanted+=(libegl1 libgl1 libxkbcommon-x11-0 libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxcb-shape0
             libxcb-render-util0 libxcb-image0 libxcb-xinerama0 libfontconfig1 libdbus-1-3 fonts-dejavu-core)
    [ -z "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && wanted+=(xvfb xauth)
  fi
  local missing=()
  for pkg in "${wanted[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      log "missing system packages (install them, then re-run): ${missing[*]}"; return 0; fi
  fi
  log "installing system packages: ${missing[*]}"
  $sudo apt-get update -qq >/dev/null || true
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { log "Python >= 3.10 is required"; exit 1; }
    "$PY" -m venv "$VENV" 2>/dev/null || { apt_install_missing; "$PY" -m venv "$VENV"; }
    log "created $VENV"
  fi
  local pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
  if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    log "installing $TORCH_SPEC (first, so nothing pulls another build)"
    "${pip[@]}" "$TORCH_SPEC"
  fi
  local before stamp want
  before="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
  stamp="$VENV/.azr-installed"
  want="$(cat "$ROOT/pyproject.toml" | cksum)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing the app, its test tools, the documents, tracking and sweep extras (torch $before stays)"
    "${pip[@]}" -e "$ROOT[test,documents,tracking,sweep]"
    echo "$want" >"$stamp"
  fi
  local after
  after="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
  if [ "$before" != "$after" ]; then
    log "torch moved from $before to $after: pin it with TORCH_SPEC and re-run"; exit 1
  fi
}
