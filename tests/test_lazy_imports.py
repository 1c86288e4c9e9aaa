"""Imports that say the truth, across the whole app: an import of a project module inside a function stays only
where it keeps a heavy library (torch, transformers, Qt...) out of the importing module's start-up, or keeps modules
out of the window's start-up, and its line says which (`# lazy: torch`, `# lazy: start-up`). Everything else is
imported at the top, where a reader of the file sees it.

Both reasons are measured, not declared. A heavy library: a third-party library (besides a few light ones) that the
imported module pulls in through its own top-level imports and its packages', and the importing module does not.
The window's start-up: the modules `python -m desktop_app --smoke-test` has imported when the window shows; a
`start-up` import sits in one of them and names a module that is not."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "desktop_app"
LIGHT = {"platformdirs", "psutil"}  # third-party but quick to import: no reason to hide them
# Modules whose imports inside functions are kept for another reason than a library, and why.
OTHER_REASONS = {
    "desktop_app.__main__": "a frozen app starts itself as the sandbox's fork server: that mode is recognised before "
                            "anything else is imported",
    "desktop_app.engine.sandbox": "every start of the app imports sandbox.launch (to recognise the fork-server mode "
                                  "first); its package must not load the executor and its imports then",
}
# The library a `# lazy:` note names first when an import keeps out several.
WEIGHT = ("torch", "transformers", "PySide6", "pyqtgraph", "lm_eval", "fastapi", "uvicorn", "peft", "tokenizers",
          "huggingface_hub", "pyarrow", "safetensors", "gguf", "numpy")


def module_names(root: Path = APP) -> dict[str, Path]:
    names = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


class Found:
    """One import statement: the project modules it loads (or else its third-party library), whether it sits
    inside a function, its line number, and its line with the one above (where its `# lazy:` note may be)."""

    def __init__(self, node: ast.Import | ast.ImportFrom, graph: ImportGraph, module: str, lines: list[str]) -> None:
        self.targets = graph.imported_modules(node, module)
        self.library = "" if self.targets else top_library(node)
        self.line = node.lineno
        self.text = lines[node.lineno - 1] + "\n" + (lines[node.lineno - 2] if node.lineno > 1 else "")
        self.inside = False


def top_library(node: ast.Import | ast.ImportFrom) -> str:
    name = node.names[0].name if isinstance(node, ast.Import) else (node.module or "")
    top = name.split(".")[0]
    third_party = isinstance(node, ast.Import) or not node.level
    return top if third_party and top not in sys.stdlib_module_names and top != "desktop_app" else ""


class ImportGraph:
    """The project's modules (name -> file) and what each import statement of theirs loads."""

    def __init__(self, modules: dict[str, Path]) -> None:
        self.modules = modules
        self.root = next(iter(modules.values())).parents[len(next(iter(modules)).split(".")) - 1] \
            if modules else Path()
        self._imports: dict[str, tuple[Found, ...]] = {}
        self._loads: dict[str, frozenset[str]] = {}

    def absolute(self, node: ast.ImportFrom, module: str) -> str:
        if not node.level:
            return node.module or ""
        base = module.split(".")
        if self.modules[module].name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - node.level + 1]
        return ".".join([*base, *([node.module] if node.module else [])])

    def imported_modules(self, node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
        """The project modules an import loads, its packages' __init__ included."""
        if isinstance(node, ast.Import):
            named = [a.name for a in node.names]
        else:
            base = self.absolute(node, module)
            named = [base] + [f"{base}.{a.name}" for a in node.names]
        found = set()
        for name in named:
            parts = name.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in self.modules}
        return sorted(found - {module})

    def imports_of(self, module: str) -> tuple[Found, ...]:
        if module not in self._imports:
            text = self.modules[module].read_text(encoding="utf-8")
            tree, lines = ast.parse(text), text.split("\n")
            inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(f) if n is not f}
            typing_only = {id(n) for block in ast.walk(tree)
                           if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                           for n in ast.walk(block)}
            found = []
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in typing_only:
                    found.append(Found(node, self, module, lines))
                    found[-1].inside = id(node) in inside
            self._imports[module] = tuple(found)
        return self._imports[module]

    def loads(self, module: str, seen: frozenset[str] = frozenset()) -> frozenset[str]:
        """The heavy libraries importing `module` loads: its top-level imports', followed through the project."""
        if module in self._loads:
            return self._loads[module]
        libraries: set[str] = set()
        for found in self.imports_of(module):
            if found.inside:
                continue
            if found.library and found.library not in LIGHT:
                libraries.add(found.library)
            for target in found.targets:
                if target not in seen:
                    libraries |= self.loads(target, seen | {module})
        if not seen:
            self._loads[module] = frozenset(libraries)
        return frozenset(libraries)

    def lazy_imports(self) -> list[tuple[str, Found, set[str]]]:
        """(module, import, the heavy libraries it keeps out of that module) for each project import in a function."""
        rows = []
        for module in sorted(self.modules):
            for found in self.imports_of(module):
                if found.inside and found.targets:
                    brought = set().union(*(self.loads(t) for t in found.targets)) - self.loads(module)
                    rows.append((module, found, brought))
        return rows

    def problems(self, start_up: frozenset[str]) -> list[str]:
        """What is wrong with each import inside a function, given the modules loaded at the window's start-up."""
        out = []
        for module, found, brought in self.lazy_imports():
            where = f"{self.modules[module].relative_to(self.root).as_posix()}:{found.line}"
            if module in OTHER_REASONS:
                continue
            keeps_out_of_start_up = module in start_up and not set(found.targets) <= start_up
            if "# lazy: start-up" in found.text and not keeps_out_of_start_up:
                out.append(f"{where}: keeps nothing out of the window's start-up; import it at the top")
            elif "# lazy: start-up" in found.text:
                continue
            elif not brought:
                out.append(f"{where}: keeps no heavy library out of {module}; import it at the top")
            elif not any(f"# lazy: {lib}" in found.text for lib in brought):
                out.append(f"{where}: say which library it keeps out, `# lazy: {heaviest(brought)}`")
        return out


def heaviest(libraries: set[str]) -> str:
    return min(libraries, key=lambda lib: (WEIGHT.index(lib) if lib in WEIGHT else len(WEIGHT), lib))


def window_start_up(tmp_path: Path) -> frozenset[str]:
    """The modules imported by the time the window shows (`-X importtime` lists each once, as it imports it)."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "AZR_WORKSPACE": str(tmp_path / "ws"),
           "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "desktop_app", "--smoke-test"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and "window shown in" in out.stdout, out.stderr[-3000:]
    return frozenset(line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
                     if line.startswith("import time:") and "|" in line)


def test_every_import_inside_a_function_keeps_something_heavy_out_and_says_what(tmp_path) -> None:
    start_up = window_start_up(tmp_path)
    assert "desktop_app.ui.main_window" in start_up and "torch" not in start_up
    assert ImportGraph(module_names()).problems(start_up) == []


def test_the_check_sees_a_needless_and_an_unexplained_lazy_import(tmp_path) -> None:
    app = tmp_path / "desktop_app"
    app.mkdir()
    files = {"__init__": "", "errors": "class E(Exception): ...\n", "heavy": "import torch\n",
             "light": "def f():\n    from desktop_app.errors import E\n",
             "user": "def f():\n    from desktop_app.heavy import x\n\n\ndef g():\n"
                     "    from desktop_app.heavy import y  # lazy: torch\n",
             "window": "def f():\n    from desktop_app.errors import E  # lazy: start-up\n\n\ndef g():\n"
                       "    from desktop_app.user import f  # lazy: start-up\n"}
    for name, text in files.items():
        (app / f"{name}.py").write_text(text, encoding="utf-8")
    start_up = frozenset({"desktop_app", "desktop_app.window", "desktop_app.errors"})
    assert ImportGraph(module_names(app)).problems(start_up) == [
        "desktop_app/light.py:2: keeps no heavy library out of desktop_app.light; import it at the top",
        "desktop_app/user.py:2: say which library it keeps out, `# lazy: torch`",
        "desktop_app/window.py:2: keeps nothing out of the window's start-up; import it at the top",
    ]
