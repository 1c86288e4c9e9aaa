"""Locate bundled resources in a source checkout, an installed package or a frozen (PyInstaller) app."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def resources_dir() -> Path:
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "resources"
    return Path(__file__).resolve().parents[2] / "resources"


def sample_corpus_dir() -> Path:
    return resources_dir() / "sample_corpus"


def cli_exe() -> str:
    """How the CLI is called: a frozen app is its own CLI; from source, the module form (no entry point on PATH)."""
    return shlex.quote(sys.executable) if getattr(sys, "frozen", False) else "python -m desktop_app"
