"""The fork server from a frozen app: its launch command, the app's private fork-server entry, the emulated
`-I -S` isolation and the zygote's honest report of it (no PyInstaller build: the frozen app is simulated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from desktop_app.engine.errors import UserError
from desktop_app.engine.sandbox import Executor, Job, Limits, launch

ROOT = Path(__file__).resolve().parents[3]
ZYGOTE = Path(launch.zygote_path())
posix_only = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork server needs fork()")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the full layer set is Linux's")
FAST = Limits(cpu_seconds=1, wall_seconds=3, memory_mb=128)
QUIT = '{"quit": true}\n'


def _hello(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(cmd, input=QUIT, capture_output=True, text=True, timeout=60, env=env if env is not None
                          else {}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[0])["hello"]


def _fake_frozen_app(tmp_path: Path) -> Path:
    """An executable that behaves like the frozen app's bootloader: Python isolated (-I -S, as PyInstaller
    configures it), the app importable, sys.frozen set, then installer/entry.py's main path."""
    app = tmp_path / "azr-trainer"
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.frozen = True; "
            "from desktop_app.__main__ import main; sys.exit(main())")
    app.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S -c "{code}" "$@"\n', encoding="utf-8")
    app.chmod(0o755)
    return app


def test_the_launch_command_from_source_and_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    assert launch.fork_server_command() == [sys.executable, "-I", "-S", str(ZYGOTE)]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/azr-model-trainer/azr-trainer")
    # the frozen app has no Python to pass -I -S to: it starts itself in its private mode
    assert launch.fork_server_command() == ["/opt/azr-model-trainer/azr-trainer", launch.FORK_SERVER_FLAG]
    assert launch.is_fork_server_invocation([launch.FORK_SERVER_FLAG])
    assert not launch.is_fork_server_invocation([]) and not launch.is_fork_server_invocation(["sandbox"])


def test_the_zygote_source_sits_next_to_its_module() -> None:
    # a frozen app finds it where the bundle's data puts it (installer/build_config.bundle_datas)
    assert ZYGOTE.is_file() and ZYGOTE.parent == ROOT / "desktop_app" / "engine" / "sandbox"


def test_the_private_entry_comes_before_argument_parsing_qt_and_torch() -> None:
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import desktop_app.engine.sandbox.launch as launch
        launch.run_fork_server = lambda: 7
        from desktop_app.__main__ import main
        code = main([launch.FORK_SERVER_FLAG, "--help"])
        heavy = ("argparse", "multiprocessing", "PySide6", "torch", "desktop_app.cli", "desktop_app.app",
                 "desktop_app.engine.sandbox.executor")
        print(code, [m for m in heavy if m in sys.modules])
    """)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["7", "[]"], done.stderr[-2000:]
    entry = (ROOT / "installer" / "entry.py").read_text(encoding="utf-8")
    assert entry.index("is_fork_server_invocation(sys.argv[1:])") < entry.index("\n    import multiprocessing\n")


def test_isolate_interpreter_leaves_the_standard_library_only() -> None:
    code = textwrap.dedent("""
        import json, os, sys
        from desktop_app.engine.sandbox.launch import isolate_interpreter
        isolate_interpreter()
        refused = {}
        for name in ("desktop_app", "torch", "pytest"):
            try:
                __import__(name)
            except ModuleNotFoundError as exc:
                refused[name] = "standard library" in str(exc)
        import fractions, json as _json  # the standard library still imports
        print(json.dumps({"env": sorted(os.environ), "path": sys.path, "refused": refused,
                          "foreign": sorted(m for m in sys.modules if m.split(".")[0] not in sys.stdlib_module_names
                                            and m != "__main__")}))
    """)
    env = {"PYTHONPATH": str(ROOT), "AZR_SECRET": "x", "HOME": "/tmp"}
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert set(result["env"]) <= set(launch.COERCED_LOCALE_VARS)
    assert result["refused"] == {"desktop_app": True, "torch": True, "pytest": True}
    assert result["foreign"] == []
    base = (os.path.abspath(sys.base_prefix), os.path.abspath(sys.base_exec_prefix))
    assert result["path"] and all(p.startswith(base) and "site-packages" not in p for p in result["path"])
    assert str(ROOT) not in result["path"]


@posix_only
@pytest.mark.parametrize("flags, why", [(["-I", "-S"], ""), (["-I"], "site module"), (["-S"], "PYTHON*")],
                         ids=["isolated", "site-ran", "environment-read"])
def test_the_zygote_reports_isolation_only_when_it_holds(flags: list[str], why: str) -> None:
    hello = _hello([sys.executable, *flags, str(ZYGOTE)])
    if why:
        assert "isolated-interpreter" not in hello["layers"] and why in hello["missing"]["isolated-interpreter"]
    else:
        assert "isolated-interpreter" in hello["layers"] and "isolated-interpreter" not in hello["missing"]


@posix_only
def test_entry_script_runs_the_fork_server_and_says_what_isolation_is_missing() -> None:
    # installer/entry.py started by a Python that read PYTHONPATH: the fork server runs, and says so honestly
    hello = _hello([sys.executable, "-S", str(ROOT / "installer" / "entry.py"), launch.FORK_SERVER_FLAG],
                   env={"PYTHONPATH": str(ROOT)})
    assert "audit-hook" in hello["layers"]
    assert "PYTHON*" in hello["missing"]["isolated-interpreter"]


@linux_only
def test_a_simulated_frozen_app_runs_programs_with_the_same_layers(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with Executor(FAST) as executor:
        from_source = executor.state()
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(_fake_frozen_app(tmp_path)))
    hostile = "import typing\nos = typing.sys.modules['os']\nprint(os.read(os.open('/etc/passwd', 0), 100))\n"
    with Executor(FAST, strict=True) as executor:
        frozen = executor.state()
        ok, refused, forked = executor.run([Job("print(sum(range(10)))\n"), Job(hostile),
                                            Job("import typing\ntyping.sys.modules['os'].fork()\n")])
    assert (frozen.layers, frozen.missing) == (from_source.layers, from_source.missing)
    assert "isolated-interpreter" in frozen.layers
    assert (ok.status, ok.stdout) == ("ok", "45\n")
    assert refused.status == "forbidden" and "root:" not in refused.stdout
    assert forked.status == "forbidden"


@posix_only
def test_a_fork_server_that_cannot_start_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "azr-trainer"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libpython3.11.so' >&2\nexit 127\n")
    broken.chmod(0o755)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(broken))
    with Executor(FAST) as executor, pytest.raises(RuntimeError) as caught:
        executor.state()
    assert "did not start (exit status 127)" in str(caught.value) and "libpython3.11.so" in str(caught.value)


def test_without_fork_the_message_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fork", raising=False)  # Windows
    with Executor(FAST) as executor, pytest.raises(UserError, match="needs a POSIX system"):
        executor.state()
