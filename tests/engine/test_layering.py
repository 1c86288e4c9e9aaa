"""The engine stays headless: importable with Qt absent, and never importing Qt or the UI layer."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "desktop_app" / "engine"
FORBIDDEN = ("PySide6", "pyqtgraph", "superqt", "desktop_app.ui", "shiboken6")


def _engine_modules() -> list[str]:
    mods = []
    for path in sorted(ENGINE.rglob("*.py")):
        rel = path.relative_to(ENGINE.parent.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods.append(".".join(parts))
    return mods


def test_engine_source_never_imports_qt() -> None:
    offenders = []
    for path in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN or n.startswith(FORBIDDEN)]
    assert not offenders, offenders


OPTIONAL_EXTRAS = ("lm_eval",)  # engine modules that subclass an optional extra's classes import it at the top


def test_every_engine_module_imports_with_qt_absent() -> None:
    """Fresh interpreter, Qt made unimportable: each engine module imports and pulls in no Qt."""
    code = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {FORBIDDEN!r} or name.startswith('desktop_app.ui'):
            raise ImportError('blocked for the test: ' + name)
sys.meta_path.insert(0, Block())
import importlib
for mod in {_engine_modules()!r}:
    try:
        importlib.import_module(mod)
    except ModuleNotFoundError as exc:  # a module of an optional extra (benchmark_lm: the harness) without it
        if (exc.name or '').split('.')[0] not in {OPTIONAL_EXTRAS!r}:
            raise
loaded = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} or m.startswith('desktop_app.ui'))
assert not loaded, loaded
print('ok', len({_engine_modules()!r}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")


def test_training_module_does_not_load_pyside6() -> None:
    code = "import sys, desktop_app.engine.train.loop; assert 'PySide6' not in sys.modules; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_lightweight_modules_do_not_import_torch() -> None:
    """specs, presets, events, workspace (and sizing) back the window's first paint: no torch there."""
    mods = ["desktop_app.engine.specs", "desktop_app.engine.presets", "desktop_app.engine.events",
            "desktop_app.engine.workspace", "desktop_app.engine.errors", "desktop_app.engine.model.sizing",
            "desktop_app.cli"]
    code = f"import sys, importlib\nfor m in {mods!r}: importlib.import_module(m)\n" \
           "heavy = [m for m in ('torch', 'transformers', 'numpy') if m in sys.modules]\nprint(heavy)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]", result.stdout
