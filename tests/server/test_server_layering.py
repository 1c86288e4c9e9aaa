"""The server is a peer of the UI and the CLI: it never imports Qt, and the engine never imports it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QT = ("PySide6", "pyqtgraph", "superqt", "shiboken6", "desktop_app.ui")


def _imports(folder: Path) -> list[tuple[str, str]]:
    out = []
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                out += [(path.name, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                out.append((path.name, node.module))
    return out


def test_engine_never_imports_the_server():
    engine = ROOT / "desktop_app" / "engine"
    offenders = [f"{f}: {m}" for f, m in _imports(engine) if m.startswith("desktop_app.server")]
    assert not offenders, offenders


def test_server_never_imports_qt():
    offenders = [f"{f}: {m}" for f, m in _imports(ROOT / "desktop_app" / "server") if m.startswith(QT)]
    assert not offenders, offenders
    code = ("import sys, desktop_app.server.app, desktop_app.cli.serve; "
            "bad = [m for m in sys.modules if m.startswith(('PySide6', 'desktop_app.ui'))]; assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
