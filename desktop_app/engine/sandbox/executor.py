"""Parent side of the sandbox: a warm fork server (zygote.py) that runs batches of untrusted programs.

The parent screens every source (screen.py), sends jobs as JSON, and re-parses every value the child
returns with the bounded literal parser; verdicts come from the zygote's view of the child (wait status,
timers, sizes) and values, never from anything the program prints. A batch that overruns its deadline
kills the zygote's whole process group (every program with it) and the next batch starts a fresh one.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.sandbox.launch import fork_server_command, zygote_path
from desktop_app.engine.sandbox.literal import LiteralError, LiteralLimits, parse_literal
from desktop_app.engine.sandbox.screen import ScreenError, screen_source

ZYGOTE = Path(zygote_path())  # in a frozen app: the copy the bundle's data carries (installer/build_config.py)
STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "forbidden", "killed")
# Layers whose absence "strict" refuses to accept.
REQUIRED_LAYERS = ("separate-process", "isolated-interpreter", "audit-hook", "memory-limit", "cpu-limit",
                   "network-namespace", "no-new-processes", "wall-timeout", "static-screen")


@dataclass(frozen=True)
class Limits:
    cpu_seconds: float = 2.0
    memory_mb: int = 256
    wall_seconds: float = 5.0
    output_bytes: int = 65536  # stdout+stderr file size (RLIMIT_FSIZE)
    stdout_chars: int = 4096  # how much of it is returned
    recursion: int = 1000

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Job:
    """One program. `calls` are argument-list texts (`"3, [1, 2]"`); each becomes `entry(*args)`."""

    source: str
    calls: tuple[str, ...] = ()
    entry: str = "f"
    limits: Limits | None = None


@dataclass(frozen=True)
class CallResult:
    ok: bool
    value: Any = None
    error: str = ""


@dataclass(frozen=True)
class RunResult:
    status: str
    reason: str = ""
    stdout: str = ""
    seconds: float = 0.0
    calls: tuple[CallResult, ...] = ()

    def to_json(self) -> dict:
        return {"status": self.status, "reason": self.reason, "stdout": self.stdout,
                "seconds": round(self.seconds, 4)}


@dataclass
class SandboxState:
    """What the GUI and CLI show: which isolation layers are active, which are missing and why."""

    layers: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)
    strict: bool = False


class Executor:
    """Runs batches of untrusted programs in a warm, isolated fork server. Thread-safe (one batch at a time)."""

    def __init__(self, limits: Limits | None = None, *, parallel: int | None = None, strict: bool = False,
                 allowed_modules: Sequence[str] | None = None, value_limits: LiteralLimits | None = None,
                 screen: bool = True):
        self.limits = limits or Limits()
        # Children spend part of their life in the kernel (fork, exit), so two per core keep cores busy.
        self.parallel = parallel or max(2, min(16, 2 * (os.cpu_count() or 1)))
        self.strict = strict
        self.value_limits = value_limits or LiteralLimits()
        self.screen = screen  # False only in tests that check the runtime layers on their own
        self._allowed = tuple(allowed_modules) if allowed_modules is not None else None
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()
        self._state = SandboxState(strict=strict)
        self._lock = threading.Lock()
        self._batch = 0
        self._workdir = tempfile.mkdtemp(prefix="azr-sandbox-")
        # the folder and the fork server go away with the executor even if close() is never called
        weakref.finalize(self, shutil.rmtree, self._workdir, True)

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def state(self) -> SandboxState:
        """Start the fork server if needed and report its isolation layers."""
        with self._lock:
            self._ensure_started()
            return replace(self._state)

    def allowed_modules(self) -> tuple[str, ...]:
        if self._allowed is None:
            self._allowed = _zygote_allowed_modules()
        return self._allowed

    def close(self) -> None:
        with self._lock:
            self._kill()
            shutil.rmtree(self._workdir, ignore_errors=True)

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL) if hasattr(os, "killpg") else proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL is not refused
            proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(Exception):
                stream.close()

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._kill()
        os.makedirs(self._workdir, exist_ok=True)
        if not hasattr(os, "fork"):
            raise UserError("the sandboxed executor needs a POSIX system (Linux or macOS); "
                            "on Windows use the mini task world, which runs without it")
        if not ZYGOTE.is_file():
            raise RuntimeError(f"the sandbox's fork server program is missing ({ZYGOTE}): the installation is "
                               "incomplete")
        self._lines = queue.Queue()
        # `python -I -S zygote.py` (isolated: no environment variables, no user site, no script folder on
        # sys.path; -S: no site), or the frozen app's fork-server mode that emulates it (launch.py).
        # An empty environment and a fresh working folder; its own session so killpg reaches every child.
        # Its stderr goes to a file: the first lines say why it did not start, if it does not.
        errors_path = os.path.join(self._workdir, "fork-server.err")
        with open(errors_path, "wb") as errors:
            self._proc = subprocess.Popen(fork_server_command(str(ZYGOTE)), stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=errors, env={}, cwd=self._workdir,
                                          start_new_session=True, bufsize=0)
        threading.Thread(target=_pump, args=(self._proc.stdout, self._lines), daemon=True,
                         name="sandbox-reader").start()
        hello = self._next_message(time.monotonic() + 30)
        if not hello or "hello" not in hello:
            try:  # its output ended: it is exiting (or hangs silent past the deadline)
                code: int | None = self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                code = None
            self._kill()
            raise RuntimeError("the sandbox's fork server did not start"
                               + (f" (exit status {code})" if code is not None else " within 30 s")
                               + _last_line(errors_path))
        layers = [*list(hello["hello"].get("layers", [])), "literal-values"]
        layers += ["static-screen"] if self.screen else []
        missing = dict(hello["hello"].get("missing", {}))
        self._state = SandboxState(layers=layers, missing=missing, strict=self.strict)
        absent = [name for name in REQUIRED_LAYERS if name not in layers]
        if self.strict and absent:
            self._kill()
            reasons = "; ".join(f"{name}: {missing.get(name, 'not available')}" for name in absent)
            raise UserError(f"strict sandbox refuses to run: missing isolation layers ({reasons})")

    def _next_message(self, deadline: float) -> dict | None:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                line = self._lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                if self._proc is None or self._proc.poll() is not None:
                    return None
                continue
            if line is None:
                return None
            try:
                return json.loads(line)
            except ValueError:
                continue

    # -- running -----------------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], *, batch_timeout: float | None = None) -> list[RunResult]:
        """Run every job; one RunResult per job, in order. Never raises for what a program does."""
        results: list[RunResult | None] = [None] * len(jobs)
        payload = []
        for index, job in enumerate(jobs):
            try:
                if self.screen:
                    screen_source(job.source, self.allowed_modules())
            except ScreenError as exc:
                results[index] = RunResult("forbidden", f"refused before running: {exc}")
                continue
            limits = job.limits or self.limits
            payload.append((index, {"source": job.source, "calls": list(job.calls), "entry": job.entry,
                                    "limits": limits.to_json()}))
        if payload:
            with self._lock:
                self._run_payload(payload, results, batch_timeout)
        return [r if r is not None else RunResult("killed", "the sandbox stopped before this program ran")
                for r in results]

    def _run_payload(self, payload: list[tuple[int, dict]], results: list, batch_timeout: float | None) -> None:
        self._ensure_started()
        self._batch += 1
        batch = self._batch
        jobs = [job for _, job in payload]
        if batch_timeout is None:
            waves = -(-len(jobs) // self.parallel)
            longest = max(float(job["limits"]["wall_seconds"]) for job in jobs)
            batch_timeout = waves * (longest + 0.5) + 5.0
        message = json.dumps({"batch": batch, "parallel": self.parallel, "jobs": jobs}) + "\n"
        try:
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(message.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._kill()
            return
        deadline = time.monotonic() + batch_timeout
        while True:
            msg = self._next_message(deadline)
            if msg is None:  # batch overran (or the fork server died): kill it all, restart next time
                self._kill()
                for index, _ in payload:
                    if results[index] is None:
                        results[index] = RunResult("timeout", f"the batch ran past its {batch_timeout:.1f} s "
                                                   "deadline; the sandbox was restarted")
                return
            if msg.get("done") == batch:
                return
            if "job" in msg and 0 <= int(msg["job"]) < len(payload):
                index, job = payload[int(msg["job"])]
                results[index] = self._result(msg, job)

    def _result(self, msg: dict, job: dict) -> RunResult:
        status = msg.get("status") if msg.get("status") in STATUSES else "killed"
        calls: list[CallResult] = []
        raw = msg.get("results") if isinstance(msg.get("results"), list) else []
        if status == "ok":
            for item in raw[: len(job["calls"])]:
                calls.append(self._call(item))
            calls += [CallResult(False, error="no result")] * (len(job["calls"]) - len(calls))
        stdout = str(msg.get("stdout", ""))[: int(job["limits"]["stdout_chars"])]
        return RunResult(status, str(msg.get("reason", ""))[:500], stdout, float(msg.get("seconds", 0.0)),
                         tuple(calls))

    def _call(self, item: Any) -> CallResult:
        if not isinstance(item, dict):
            return CallResult(False, error="malformed result")
        if "value" in item:
            try:
                return CallResult(True, parse_literal(str(item["value"]), self.value_limits))
            except LiteralError as exc:
                return CallResult(False, error=f"unreadable value: {exc}")
        return CallResult(False, error=str(item.get("error", "error"))[:300])


def _pump(stream: Any, lines: queue.Queue) -> None:
    try:
        for raw in iter(stream.readline, b""):
            lines.put(raw.decode("utf-8", "replace"))
    except (OSError, ValueError):
        pass
    lines.put(None)


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            lines = [line for line in fh.read()[-4000:].decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return f": {lines[-1].strip()[:300]}" if lines else ""


def _zygote_allowed_modules() -> tuple[str, ...]:
    # Read the allow-list from the zygote's source without importing it into this process.
    import ast

    tree = ast.parse(ZYGOTE.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ALLOWED_MODULES":
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("zygote.py has no ALLOWED_MODULES")
