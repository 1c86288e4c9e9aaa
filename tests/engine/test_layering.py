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


# --- imports that say the truth: no import runs up the layers, at the top of a file or inside a function -----------

# The engine's stages, bottom to top (ARCHITECTURE: data/ model/ ... then the methods, the loop, what runs several
# runs, and the one door). A module may import its own layer and the layers below it, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "events", "fileio", "spec_base", "method_options", "methods", "specs", "presets", "paths", "protocols",
     "os_faults", "devices", "fault_report", "run_folder", "pipeline_folder", "sweep_folder", "column_roles"),
    ("data",),
    ("model",),
    ("hub",),
    ("generate", "sandbox", "finetune"),
    ("tasks", "selfplay", "evaluate"),
    ("objectives",),
    ("train", "export"),
    ("recipes", "runs", "run_compare", "workspace", "run_commands"),
    ("session",),
    ("sweep",),  # trials of runs, each through the session
)


def layer_of(name: str) -> int:
    return next(i for i, units in enumerate(LAYERS) if name in units)


def engine_imports(path: Path) -> list[tuple[str, bool]]:
    """(imported engine module, whether the import sits inside a function) for every import of `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f) if n is not f}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("desktop_app.engine"):
            names = [node.module] if node.module != "desktop_app.engine" else \
                [f"desktop_app.engine.{a.name}" for a in node.names]
            out += [(n, id(node) in inner) for n in names]
        elif isinstance(node, ast.Import):
            out += [(a.name, id(node) in inner) for a in node.names if a.name.startswith("desktop_app.engine.")]
    return out


def upward_imports(root: Path = ENGINE) -> set[tuple[str, str]]:
    """(file relative to the engine folder `root`, imported module) for every import that runs up the layers."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        unit = rel.parts[0].removesuffix(".py")
        if unit == "__init__":
            continue
        for module, _inside in engine_imports(path):
            target = module.split(".")[2]
            if target != unit and layer_of(target) > layer_of(unit):
                found.add((rel.as_posix(), module))
    return found


def test_every_engine_unit_has_a_layer() -> None:
    units = {p.relative_to(ENGINE).parts[0].removesuffix(".py") for p in ENGINE.rglob("*.py")} - {"__init__"}
    placed = {u for layer in LAYERS for u in layer}
    assert units <= placed, f"put these in a layer of LAYERS: {sorted(units - placed)}"


def test_no_import_runs_up_the_layers_at_the_top_or_inside_a_function() -> None:
    assert upward_imports() == set()  # five ran up inside functions until 2026-11-29, which a top-level check missed


def test_the_check_sees_an_upward_import_inside_a_function(tmp_path) -> None:
    """The check itself: an import of the loop inside a data-stage function is caught, as one at the top is."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sneaky.py").write_text(
        "def f():\n    from desktop_app.engine.train.loop import train\n    return train\n", encoding="utf-8")
    (tmp_path / "data" / "plain.py").write_text("from desktop_app.engine.errors import UserError\n", encoding="utf-8")
    assert engine_imports(tmp_path / "data" / "sneaky.py") == [("desktop_app.engine.train.loop", True)]
    assert engine_imports(tmp_path / "data" / "plain.py") == [("desktop_app.engine.errors", False)]
    assert upward_imports(tmp_path) == {("data/sneaky.py", "desktop_app.engine.train.loop")}

# Imports inside functions are checked across the whole app by tests/test_lazy_imports.py: each keeps a heavy
# library out of its module's start-up and says which.
