"""How the sandbox's fork server (zygote.py) starts, from source and from a frozen (PyInstaller) app.

From source it is `python -I -S zygote.py`. A frozen app has no Python to start: `sys.executable` is the
app itself. So the app recognises FORK_SERVER_FLAG as its first argument, before Qt, torch or argument
parsing (installer/entry.py -> desktop_app/__main__.py), and `run_fork_server` makes the interpreter it
runs in what `-I -S` gives, then runs the bundled zygote.py source as `__main__`.

PyInstaller's bootloader already starts Python isolated (sys.flags: isolated, no_site, ignore_environment),
but it sets environment variables of its own, its runtime hooks import packages (setuptools, PySide6) and
the bundle's archive holds torch, Qt... next to the standard library. sys.flags cannot change once the
interpreter runs, so `isolate_interpreter` finishes the job: an empty environment, an import path of the
standard library only (a finder refuses every other top-level name), no module or finder of the app or its
packages left, no bytecode written. The zygote checks the result before it reports "isolated-interpreter".

Imports stay to `os` and `sys` (no pathlib): whatever this module imports is loaded in the fork server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

FORK_SERVER_FLAG = "--azr-sandbox-fork-server"
# Python's own locale coercion (PEP 538) may set this one at start-up, even in an empty environment.
COERCED_LOCALE_VARS = ("LC_CTYPE",)


def zygote_path() -> str:
    """zygote.py next to this module: in the source tree, or where the bundle's data puts it when frozen."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def fork_server_command(zygote: str | None = None) -> list[str]:
    """The command that starts the fork server (its environment must be empty, see Executor)."""
    if is_frozen():
        return [sys.executable, FORK_SERVER_FLAG]
    return [sys.executable, "-I", "-S", zygote or zygote_path()]


def is_fork_server_invocation(argv: Sequence[str]) -> bool:
    return len(argv) >= 1 and argv[0] == FORK_SERVER_FLAG


class StdlibOnlyFinder:
    """First on sys.meta_path of an emulated isolated interpreter: only standard-library imports resolve."""

    stdlib_only = True  # what the zygote looks for before it reports "isolated-interpreter"

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name.partition(".")[0] in _stdlib_names():
            return None  # the normal finders go on
        raise ModuleNotFoundError(f"No module named {name!r} (the sandbox's fork server imports only the standard "
                                  "library)", name=name)


def _stdlib_names() -> frozenset[str]:
    return frozenset(sys.stdlib_module_names) if hasattr(sys, "stdlib_module_names") else frozenset(
        sys.builtin_module_names)


def _kept_module(name: str) -> bool:
    top = name.partition(".")[0]
    # pyimod*: PyInstaller's own import machinery, which loads the standard library from the bundle.
    return name == "__main__" or top in _stdlib_names() or top.startswith("pyimod")


def stdlib_path() -> list[str]:
    """The entries of sys.path that hold the standard library (and nothing the user or a venv added)."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    kept = []
    for entry in sys.path:
        if not entry:
            continue
        full = os.path.abspath(entry)
        if frozen_root:
            # base_library.zip, lib-dynload and the archive's own entry (the bundle root): the bootloader's path
            ok = (full == os.path.abspath(frozen_root) or full.startswith(os.path.abspath(frozen_root) + os.sep)) \
                and not full.endswith(".egg")
        else:
            roots = {os.path.abspath(sys.base_prefix), os.path.abspath(sys.base_exec_prefix)}
            ok = any(full.startswith(root + os.sep) for root in roots) and not any(
                part in ("site-packages", "dist-packages") for part in full.split(os.sep))
        if ok and full not in kept:
            kept.append(full)
    return kept


def isolate_interpreter() -> None:
    """Emulate `-I -S` in a running interpreter: what it loaded stays stdlib, what it may load too."""
    os.environ.clear()  # also unsets them at the OS level: forked children see none
    sys.path[:] = stdlib_path()
    sys.path_importer_cache.clear()
    sys.dont_write_bytecode = True
    for name in [n for n in sys.modules if not _kept_module(n)]:
        del sys.modules[name]
    # Finders that packages installed at start-up (a frozen app's runtime hooks: setuptools' distutils shim).
    sys.meta_path[:] = [f for f in sys.meta_path if _kept_module(getattr(f, "__module__", "") or "")]
    sys.path_hooks[:] = [h for h in sys.path_hooks if _kept_module(getattr(h, "__module__", "") or "")]
    if not any(getattr(f, "stdlib_only", False) for f in sys.meta_path):
        sys.meta_path.insert(0, StdlibOnlyFinder())


def run_fork_server(zygote: str | None = None) -> int:
    """The frozen app's fork-server mode: isolate this interpreter, then run zygote.py as `__main__`."""
    path = zygote or zygote_path()
    with open(path, encoding="utf-8") as fh:  # read first: the bundle's data is found by this module's path
        source = fh.read()
    isolate_interpreter()
    code = compile(source, path, "exec", dont_inherit=True)
    module = type(sys)("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    exec(code, module.__dict__)  # the zygote ends with sys.exit(main())
    return 0
