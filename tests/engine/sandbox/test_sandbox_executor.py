"""The sandboxed executor: escapes, resource bombs, values and verdicts, process hygiene."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from desktop_app.engine.errors import UserError
from desktop_app.engine.sandbox import Executor, Job, Limits
from desktop_app.engine.sandbox import executor as executor_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the full layer set is Linux's")

ESCAPES = sorted(Path(__file__).with_name("escapes").glob("*.py"))
FAST = Limits(cpu_seconds=1, wall_seconds=3, memory_mb=128)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _gone(pgid: int, timeout: float = 3.0) -> bool:
    """Every process of the group has exited (SIGKILL is sent to all at once; a busy one takes a moment)."""
    deadline = time.monotonic() + timeout
    while _group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not _group_members(pgid)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory):
    """A sentinel file, a marker path that must never appear, and a listener no program may reach."""
    folder = tmp_path_factory.mktemp("host")
    sentinel = folder / "sentinel"
    sentinel.write_text("keep")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    yield {"dir": folder, "sentinel": sentinel, "marker": folder / "marker", "listener": listener}
    listener.close()


def _source(path: Path, host: dict) -> str:
    return (path.read_text().replace("MARKER_PATH", str(host["marker"]))
            .replace("SENTINEL_PATH", str(host["sentinel"])).replace("SENTINEL_DIR", str(host["dir"]))
            .replace("LISTEN_PORT", str(host["listener"].getsockname()[1])).replace("HOST_PID", str(os.getpid())))


def _host_unaffected(host: dict) -> None:
    assert host["sentinel"].read_text() == "keep"
    assert not host["marker"].exists()
    with pytest.raises(BlockingIOError):
        host["listener"].accept()


def test_at_least_fifty_escape_programs_ship() -> None:
    assert len(ESCAPES) >= 50


@pytest.mark.parametrize("screen", [True, False], ids=["all-layers", "runtime-layers-only"])
def test_escape_attempts_never_affect_the_host(host: dict, screen: bool) -> None:
    with Executor(FAST, screen=screen) as executor:
        results = executor.run([Job(_source(path, host)) for path in ESCAPES])
        zygote = executor._proc.pid
    _host_unaffected(host)
    assert _gone(zygote), "no program outlives the executor"
    verdicts = {path.stem: result for path, result in zip(ESCAPES, results, strict=False)}
    if screen:  # with every layer on, every attempt gets a refusal with its reason
        for name, result in verdicts.items():
            assert result.status in ("forbidden", "error"), (name, result)
            assert result.reason, name
    else:  # the runtime layers alone stop every attempt that reaches the OS
        for name in ("globals_os_fork", "globals_kill_host", "globals_remove_sentinel", "globals_execv",
                     "globals_write_marker", "globals_addaudithook", "subclasses_wrap_close", "subclasses_popen",
                     "frame_walk_generator", "frame_walk_traceback", "globals_sys_getframe", "os_system"):
            assert verdicts[name].status == "forbidden", (name, verdicts[name])
            assert verdicts[name].reason


def test_values_come_back_as_parsed_literals_and_stdout_is_captured() -> None:
    source = "def f(x, ys):\n    print('seen', x)\n    return {'sum': x + sum(ys), 'pair': (x, ys[:1])}\n"
    with Executor(FAST) as executor:
        (result,) = executor.run([Job(source, calls=("2, [3, 4]", "1, []"))])
    assert result.status == "ok"
    assert result.stdout == "seen 2\nseen 1\n"
    assert [c.value for c in result.calls] == [{"sum": 9, "pair": (2, [3])}, {"sum": 1, "pair": (1, [])}]


@pytest.mark.parametrize("body, needle", [
    ("return float('nan')", "unreadable"),
    ("return object()", "only plain values"),
    ("return {1, 2}", "only plain values"),
    ("return 1 / 0", "ZeroDivisionError"),
    ("return [[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]", "nested"),
])
def test_values_that_cannot_cross_are_refused_per_call(body: str, needle: str) -> None:
    with Executor(FAST) as executor:
        (result,) = executor.run([Job(f"def f():\n    {body}\n", calls=("",))])
    assert result.status == "ok"
    (call,) = result.calls
    assert not call.ok and needle in call.error


BOMBS = {
    "infinite_loop": ("while True:\n    pass\n", {"timeout"}),
    "huge_power": ("x = 9**9**9**9\n", {"timeout"}),
    "memory_balloon": ("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))\n", {"memory"}),
    "gigabyte_stdout": ("chunk = 'x' * 10**6\nfor _ in range(1000):\n    print(chunk)\n", {"output_limit"}),
    "deep_recursion": ("def r(n):\n    return r(n + 1)\nr(0)\n", {"error"}),
    "blocked_without_cpu": ("g = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
                            ".__init__.__globals__\ng['read'](g['pipe']()[0], 1)\n", {"timeout"}),
    "fork_bomb": ("g = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
                  ".__init__.__globals__\nwhile True:\n    g['fork']()\n", {"forbidden"}),
    "file_size_bomb": ("g = [c for c in ().__class__.__base__.__subclasses__()"
                       " if c.__name__ == '_wrap_close'][0].__init__.__globals__\n"
                       "fd = g['open']('big', 65)\nwhile True:\n    g['write'](fd, b'x' * 65536)\n",
                       {"output_limit"}),
}


def test_resource_bombs_are_killed_in_time_and_leave_nothing_behind() -> None:
    limits = Limits(cpu_seconds=1, wall_seconds=2, memory_mb=128, output_bytes=1 << 20)
    with Executor(limits, screen=False, parallel=2) as executor:
        start = time.monotonic()
        results = executor.run([Job(source) for source, _ in BOMBS.values()])
        elapsed = time.monotonic() - start
        for (name, (_, expected)), result in zip(BOMBS.items(), results, strict=False):
            assert result.status in expected, (name, result)
            assert result.reason, name
            assert result.seconds <= limits.wall_seconds + 1.0, (name, result.seconds)
        assert elapsed < len(BOMBS) / 2 * (limits.wall_seconds + 1.0)
        zygote = executor._proc.pid
        assert _group_members(zygote) == [zygote], "only the fork server remains between batches"
        (after,) = executor.run([Job("def f(x):\n    return x * 2\n", calls=("21",))])
        assert after.status == "ok" and after.calls[0].value == 42
    assert _gone(zygote)


def test_a_batch_past_its_deadline_restarts_the_fork_server() -> None:
    slow = Limits(cpu_seconds=30, wall_seconds=30)
    with Executor(slow) as executor:
        executor.state()
        first = executor._proc.pid
        (result,) = executor.run([Job("while True:\n    pass\n")], batch_timeout=1.0)
        assert result.status == "timeout" and "restarted" in result.reason
        assert _gone(first)
        (again,) = executor.run([Job("def f():\n    return 'fine'\n", calls=("",))])
        assert again.calls[0].value == "fine"
        assert executor._proc.pid != first


def test_layers_are_reported_and_strict_refuses_when_one_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    with Executor(strict=True) as executor:
        state = executor.state()
    for layer in ("isolated-interpreter", "audit-hook", "memory-limit", "cpu-limit", "static-screen",
                  "no-new-processes", "wall-timeout"):
        assert layer in state.layers
    monkeypatch.setattr(executor_module, "REQUIRED_LAYERS", (*executor_module.REQUIRED_LAYERS, "quantum-lock"))
    with Executor(strict=True) as executor, pytest.raises(UserError, match="quantum-lock"):
        executor.state()


def test_the_child_sees_no_environment_and_a_fresh_folder() -> None:
    g = ("g = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
         ".__init__.__globals__\n")
    source = g + "def f():\n    return [sorted(g['environ']), g['getcwd']().startswith('/tmp')]\n"
    with Executor(FAST, screen=False) as executor:
        (result,) = executor.run([Job(source, calls=("",))])
    assert result.calls[0].value[0] == [] or result.calls[0].value[0] == ["LC_CTYPE"]
    assert result.calls[0].value[1] is True
