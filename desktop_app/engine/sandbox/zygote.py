"""The sandbox's fork server. Runs as its own isolated interpreter (`python -I -S zygote.py`), stdlib only;
in a frozen app, as the app's own executable in its fork-server mode (launch.py), with the same isolation.

It never runs untrusted code itself: for every program it forks a child that drops privileges, applies
resource limits, installs the audit hook and only then compiles and runs the program. So no program can
leave anything behind for the next one (every program starts from the same clean process), yet a
program costs a fork (~1-3 ms) instead of an interpreter start (~20-40 ms).

Protocol, JSON lines. Parent -> stdin: {"batch": id, "parallel": k, "jobs": [{"source", "calls", "limits"}]}.
Zygote -> stdout: {"hello": {"layers": [...], "missing": {...}}} once, then one {"job": i, ...} per job
and {"done": id} per batch. A child reports to the zygote through its own pipe; stdout/stderr of the
program go to a size-limited file in its temporary folder. Values cross as literal text only; the
parent re-parses them (literal.py) and decides every verdict from values.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import shutil
import signal
import sys
import tempfile
import time

# Modules an untrusted program may import (already imported here, so a child never opens a file for them).
ALLOWED_MODULES = ("math", "itertools", "functools", "collections", "string", "re", "heapq", "bisect",
                   "operator", "random", "statistics", "fractions", "decimal", "typing", "dataclasses",
                   "copy", "json", "datetime", "enum", "abc", "numbers", "array")
for _name in ALLOWED_MODULES:
    with contextlib.suppress(ImportError):  # all stdlib; a trimmed Python may lack one
        __import__(_name)

MAX_RESULT_BYTES = 1 << 20
SAFE_BUILTINS = ("abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "dict", "divmod",
                 "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance",
                 "issubclass", "iter", "len", "list", "map", "max", "min", "next", "oct", "ord", "pow", "print",
                 "range", "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "type",
                 "zip", "Exception", "ValueError", "TypeError", "KeyError", "IndexError", "ZeroDivisionError",
                 "StopIteration", "ArithmeticError", "AssertionError", "RuntimeError", "NotImplementedError",
                 "True", "False", "None", "object", "property", "staticmethod", "classmethod", "super",
                 "__build_class__", "__name__")
# Audit events refused once the hook is armed (prefix match). Reads/writes are judged by path below.
DENIED_EVENTS = ("socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork",
                 "os.forkpty", "os.kill", "os.killpg", "os.setsid", "signal.", "ctypes.", "sys.addaudithook",
                 "gc.", "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
                 "object.__getattr__", "object.__setattr__", "object.__delattr__", "code.__new__",
                 "function.__new__", "builtins.input", "os.chdir", "os.putenv", "os.unsetenv", "os.startfile",
                 "winreg.", "_winapi.", "msvcrt.", "mmap.", "os.add_dll_directory", "sys.monitoring",
                 "cpython.", "marshal.", "pickle.", "shelve.", "urllib.", "http.", "ftplib.", "smtplib.",
                 "poplib.", "imaplib.", "nntplib.", "telnetlib.", "webbrowser.", "sqlite3.", "fcntl.", "pty.",
                 "resource.setrlimit", "resource.prlimit", "os.setuid", "_thread.start_new_thread",
                 "sys.setrecursionlimit")
PATH_EVENTS = ("open", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
               "os.symlink", "os.truncate", "os.utime", "os.listdir", "os.scandir", "shutil.", "os.chflags",
               "os.lchmod", "os.lchown", "os.mkfifo", "os.mknod", "os.setxattr", "os.removexattr",
               "os.getxattr", "os.listxattr", "glob.glob", "pathlib.Path.glob", "pathlib.Path.rglob")


def _libc():
    try:
        import ctypes
        import ctypes.util

        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except Exception:  # pragma: no cover - no ctypes/libc
        return None


LIBC = _libc() if sys.platform.startswith("linux") else None
NOBODY = 65534


def isolate_network() -> list[str]:
    """Enter new network (and, unprivileged, user) namespaces: no interface but a downed loopback."""
    if LIBC is None:
        return []
    clone_newnet, clone_newuser = 0x40000000, 0x10000000
    if os.geteuid() == 0 and LIBC.unshare(clone_newnet) == 0:
        return ["network-namespace"]
    if LIBC.unshare(clone_newuser | clone_newnet) == 0:
        return ["user-namespace", "network-namespace"]
    return []


def interpreter_isolation() -> str:
    """'' when this interpreter is isolated as `python -I -S` makes it, else why not: checked, not assumed
    (a frozen app cannot pass -I -S to itself; launch.py emulates them and this proves the result)."""
    stdlib = frozenset(getattr(sys, "stdlib_module_names", sys.builtin_module_names))
    extra = sorted(set(os.environ) - {"LC_CTYPE"})  # LC_CTYPE: Python's own locale coercion (PEP 538)
    if extra:
        return f"environment variables are set ({', '.join(extra[:3])})"
    if not sys.flags.no_site and "site" in sys.modules:
        return "the site module ran at start-up (site-packages, .pth files, the user site)"
    if not sys.flags.ignore_environment:
        return "Python read its PYTHON* environment variables at start-up (no -I or -E)"
    path = [os.path.abspath(p) for p in sys.path if p]
    if os.path.dirname(os.path.abspath(__file__)) in path:
        return "the app's own code folder is on the import path"
    if any(part in ("site-packages", "dist-packages") for p in path for part in p.split(os.sep)):
        return "a site-packages folder is on the import path"
    if getattr(sys, "frozen", False) and not getattr(sys.meta_path[0], "stdlib_only", False):
        return "the frozen app's archive holds more than the standard library and no stdlib-only import guard is on"
    foreign = sorted(n for n in sys.modules if n.partition(".")[0] not in stdlib and n != "__main__"
                     and not n.startswith("pyimod"))  # pyimod*: PyInstaller's importer of the stdlib
    if foreign:
        return f"modules from outside the standard library are loaded ({', '.join(foreign[:3])})"
    return ""


def layers() -> tuple[list[str], dict[str, str]]:
    active = ["separate-process", "process-group", "fresh-temp-folder", "audit-hook", "wall-timeout", "output-cap",
              "fork-per-program"]
    missing: dict[str, str] = {}
    why = interpreter_isolation()
    if why:
        missing["isolated-interpreter"] = why
    else:
        active.insert(2, "isolated-interpreter")
    active += isolate_network()
    if "network-namespace" not in active:
        missing["network-namespace"] = ("not available here (needs Linux with unprivileged user namespaces "
                                        "or root); sockets are still refused by the audit hook")
    if hasattr(resource, "RLIMIT_AS") and sys.platform.startswith("linux"):
        active.append("memory-limit")
    else:
        missing["memory-limit"] = "the OS does not enforce an address-space limit"
    active += ["cpu-limit", "file-size-limit", "open-files-limit"]
    if os.geteuid() == 0:
        active.append("unprivileged-user")
    if hasattr(resource, "RLIMIT_NPROC"):
        active.append("no-new-processes")
    else:
        missing["no-new-processes"] = "RLIMIT_NPROC is not available"
    if LIBC is not None:
        active.append("parent-death-kill")
    return active, missing


class Violation(RuntimeError):
    """Raised by the audit hook for a refused operation."""


def _install_hook(tmpdir: str, report_fd: int, code_box: list) -> None:
    real_tmp = os.path.realpath(tmpdir)
    allowed_top = frozenset(ALLOWED_MODULES)
    realpath, isinstance_, fspath, write, dumps = os.path.realpath, isinstance, os.fspath, os.write, json.dumps
    state = {"armed": True, "reported": 0}

    def refuse(event: str, detail: str) -> None:
        if state["reported"] < 8:  # the first refusals reach the zygote at once: a program cannot hide them
            state["reported"] += 1
            write(report_fd, (dumps({"violation": event, "detail": detail[:200]}) + "\n").encode())
        raise Violation(f"{event} is not allowed in the sandbox ({detail[:120]})")

    def inside(path: object) -> bool:
        if isinstance_(path, int):
            return False
        try:
            p = realpath(fspath(path))
        except Exception:
            return False
        return p == real_tmp or p.startswith(real_tmp + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event == "exec":
            if code_box and args and args[0] is code_box[0]:
                return
            refuse(event, "dynamic code execution")
        if event == "compile":
            refuse(event, "compiling code at run time")
        if event == "import":
            name = str(args[0]) if args else ""
            if name.split(".")[0] not in allowed_top:
                refuse(event, f"module {name!r} is not on the allow-list")
            return
        for prefix in DENIED_EVENTS:
            if event.startswith(prefix):
                refuse(event, repr(args)[:120])
        for prefix in PATH_EVENTS:
            if event.startswith(prefix):
                paths = [a for a in args[:2] if isinstance_(a, (str, bytes, int)) or hasattr(a, "__fspath__")]
                if event in ("open", "os.listdir", "os.scandir") and paths[:1]:
                    paths = paths[:1]
                if not paths or not all(inside(p) for p in paths):
                    refuse(event, f"path outside the sandbox folder: {repr(args[:2])[:100]}")
                return

    sys.addaudithook(hook)


def _plain(value: object, budget: list) -> object:
    """Literal text of a plain value (the child's side of literal.to_literal; refuses other types)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError("value too large")
    t = type(value)
    if t in (bool, int, float, str) or value is None:
        if t is float and value != value:
            return "nan-refused"
        return repr(value)
    if t is list:
        return "[" + ", ".join(_plain(v, budget) for v in value) + "]"
    if t is tuple:
        return "(" + ", ".join(_plain(v, budget) for v in value) + ("," if len(value) == 1 else "") + ")"
    if t is dict:
        return "{" + ", ".join(f"{_plain(k, budget)}: {_plain(v, budget)}" for k, v in value.items()) + "}"
    raise TypeError(f"f returned a value of type {t.__name__}; only plain values can leave the sandbox")


def _child(job: dict, tmpdir: str, report_fd: int) -> None:
    """In the forked child: confine, then run. Never returns. The program runs in this very frame (as deep in the
    stack as it always did: its recursion limit leaves it the same depth)."""
    import ast  # noqa: F401 - loaded before the hook (literal_eval of inputs)

    try:
        _confine(job.get("limits", {}), tmpdir, report_fd)
    except Exception as exc:  # pragma: no cover - confinement failed: refuse to run anything
        os.write(report_fd, (json.dumps({"setup_error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
        os._exit(3)
    try:
        code = compile(job["source"], "<program>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        os.write(report_fd, (json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}) + "\n").encode())
        os._exit(0)
    import ast as _ast

    calls = [_ast.literal_eval("(" + text + ",)") if text.strip() else () for text in job.get("calls") or []]
    entry = job.get("entry") or "f"
    namespace = {"__builtins__": _safe_builtins(report_fd), "__name__": "__main__"}
    # taken before the program runs, so that it cannot swap what reports its result
    plain, failure, write, dumps = _plain, _failure, os.write, json.dumps
    result: dict = {"results": []}
    _install_hook(tmpdir, report_fd, [code])
    try:
        exec(code, namespace)
        if calls:
            fn = namespace.get(entry)
            if not callable(fn):
                raise NameError(f"the program does not define a function {entry}()")
            for args in calls:
                try:
                    result["results"].append({"value": plain(fn(*args), [100_000])})
                except MemoryError:
                    raise
                except RecursionError as exc:
                    result["results"].append({"error": f"RecursionError: {exc}"[:300]})
                except BaseException as exc:
                    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                        raise
                    result["results"].append({"error": f"{type(exc).__name__}: {exc}"[:300]})
    except BaseException as exc:
        result = failure(exc, result)
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
    text = dumps(result)
    if len(text) > MAX_RESULT_BYTES:
        text = dumps({"error": "results too large"})
    write(report_fd, (text + "\n").encode())
    os._exit(0)


def _failure(exc: BaseException, result: dict) -> dict:
    """The report of a program that raised `exc` (its results so far kept, except when memory ran out)."""
    if isinstance(exc, MemoryError):
        return {"memory": True}
    if isinstance(exc, Violation):
        result["error"] = str(exc)[:500]
    elif isinstance(exc, SystemExit):
        result["error"] = f"SystemExit({exc.code!r})"[:300]
    else:
        result["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return result


def _confine(limits: dict, tmpdir: str, report_fd: int) -> None:
    """The child's confinement: its own folder and output file, no other open files, the zygote's death ends it,
    no privileges (as root), resource limits."""
    os.chdir(tmpdir)
    out = os.open(os.path.join(tmpdir, "out.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = sorted({0, 1, 2, report_fd})
    low = 3
    for fd in keep:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 4096)
    if LIBC is not None:
        LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the zygote
    if os.geteuid() == 0:
        os.chown(tmpdir, NOBODY, NOBODY)
        os.chown(os.path.join(tmpdir, "out.txt"), NOBODY, NOBODY)
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    _set_limits(limits)
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="replace")  # noqa: SIM115
    sys.stderr = sys.stdout


def _set_limits(limits: dict) -> None:
    """CPU time, memory (above what the child already uses), output size, open files, no new processes, recursion."""
    with open("/proc/self/statm") as fh:
        base = int(fh.read().split()[0]) * resource.getpagesize()
    cpu = max(1, int(limits.get("cpu_seconds", 2)))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    memory = int(limits.get("memory_mb", 256)) << 20
    if hasattr(resource, "RLIMIT_AS"):
        resource.setrlimit(resource.RLIMIT_AS, (base + memory, base + memory))
    size = int(limits.get("output_bytes", 65536))
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))
    if hasattr(resource, "RLIMIT_NPROC"):
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    sys.setrecursionlimit(int(limits.get("recursion", 1000)))
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)


def _safe_builtins(report_fd: int) -> dict:
    """The builtins a program sees: SAFE_BUILTINS, and an __import__ of the allow-listed (preloaded) modules only."""
    import builtins as _builtins

    safe = {name: getattr(_builtins, name) for name in SAFE_BUILTINS if hasattr(_builtins, name)}
    modules = sys.modules
    write, dumps = os.write, json.dumps

    def safe_import(name: str, globals=None, locals=None, fromlist=(), level=0):
        if level or name.split(".")[0] not in ALLOWED_MODULES:
            write(report_fd, (dumps({"violation": "import", "detail": f"module {name!r}"}) + "\n").encode())
            raise Violation(f"import of {name!r} is not allowed in the sandbox")
        module = modules.get(name)
        if module is None:
            raise ImportError(f"module {name!r} is not available in the sandbox")
        if fromlist or "." not in name:
            return module
        return modules[name.split(".")[0]]

    safe["__import__"] = safe_import
    return safe


def _classify(job_report: list, wait_status: int, timed_out: bool, out_size: int, limits: dict) -> tuple[str, str]:
    messages = []
    for line in job_report:
        try:
            messages.append(json.loads(line))
        except ValueError:
            continue
    violations = [m for m in messages if "violation" in m]
    final = next((m for m in reversed(messages) if "results" in m or "error" in m or "memory" in m
                  or "setup_error" in m), None)
    if timed_out:
        return "timeout", f"killed after the wall-clock limit of {limits.get('wall_seconds', 5)} s"
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        if sig == signal.SIGXCPU:
            return "timeout", f"CPU time limit of {limits.get('cpu_seconds', 2)} s exceeded"
        if sig == signal.SIGXFSZ:
            return "output_limit", f"output over {limits.get('output_bytes', 65536)} bytes"
        if violations:
            return "forbidden", f"{violations[0]['violation']} refused, then killed by signal {sig}"
        if sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT) and final is None:
            return "killed", f"crashed (signal {sig}); likely out of memory or stack"
        return "killed", f"killed by signal {sig}"
    if violations:
        v = violations[0]
        return "forbidden", f"{v['violation']} refused: {v.get('detail', '')}"[:300]
    if out_size >= int(limits.get("output_bytes", 65536)):
        return "output_limit", f"output over {limits.get('output_bytes', 65536)} bytes"
    if final is None:
        return "error", f"the program ended without a result (exit status {os.WEXITSTATUS(wait_status)})"
    if final.get("memory"):
        return "memory", f"memory limit of {limits.get('memory_mb', 256)} MB exceeded"
    if final.get("setup_error"):
        return "killed", "sandbox setup failed: " + str(final["setup_error"])
    if final.get("error"):
        return "error", str(final["error"])
    return "ok", ""


def _run_batch(message: dict, emit) -> None:
    jobs = message.get("jobs", [])
    parallel = max(1, int(message.get("parallel", 1)))
    pending = list(enumerate(jobs))
    running: dict[int, dict] = {}  # pid -> info
    while pending or running:
        while pending and len(running) < parallel:
            index, job = pending.pop(0)
            tmpdir = tempfile.mkdtemp(prefix="azr-sbx-")
            read_fd, write_fd = os.pipe()
            start = time.monotonic()
            pid = os.fork()
            if pid == 0:  # child (forked here, not in a helper: the program runs no deeper in the stack)
                try:
                    os.close(read_fd)
                    _child(job, tmpdir, write_fd)
                finally:
                    os._exit(4)
            os.close(write_fd)
            running[pid] = _tracked(index, job, tmpdir, read_fd, start)
        _read_reports(running)
        now = time.monotonic()
        for pid, info in list(running.items()):
            if now > info["deadline"] and not info["timed_out"]:
                info["timed_out"] = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
            seconds = time.monotonic() - info["start"]
            _drain(info)
            del running[pid]
            emit(_job_report(info, wait_status, seconds))


def _tracked(index: int, job: dict, tmpdir: str, read_fd: int, start: float) -> dict:
    """What the zygote tracks of a running child: its job, report pipe (read without blocking), clock and folder."""
    os.set_blocking(read_fd, False)
    wall = float(job.get("limits", {}).get("wall_seconds", 5))
    return {"index": index, "fd": read_fd, "buf": bytearray(), "start": start, "deadline": start + wall,
            "tmp": tmpdir, "limits": job.get("limits", {}), "timed_out": False}


def _read_reports(running: dict[int, dict]) -> None:
    """Sleep until a report pipe has data or closes (the child ended) or the nearest deadline, and read what came;
    poll briefly only for children that closed their pipe but are not reaped yet."""
    fds = {info["fd"]: pid for pid, info in running.items() if info["fd"] >= 0}
    wait = min([info["deadline"] for info in running.values()], default=0.0) - time.monotonic()
    wait = 0.0005 if len(fds) < len(running) else min(max(wait, 0.0), 0.05)
    if not fds:
        time.sleep(wait)
        return
    ready, _, _ = select.select(list(fds), [], [], wait)
    for fd in ready:
        info = running[fds[fd]]
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if chunk and len(info["buf"]) < MAX_RESULT_BYTES + 4096:
            info["buf"] += chunk
        elif not chunk:
            os.close(fd)
            info["fd"] = -1


def _drain(info: dict) -> None:
    """Read the rest of an ended child's report pipe (up to the size cap) and close it."""
    if info["fd"] < 0:
        return
    try:
        while True:
            chunk = os.read(info["fd"], 65536)
            if not chunk or len(info["buf"]) > MAX_RESULT_BYTES + 4096:
                break
            info["buf"] += chunk
    except BlockingIOError:
        pass
    os.close(info["fd"])


def _job_report(info: dict, wait_status: int, seconds: float) -> dict:
    """The {"job": i, ...} message of an ended child: its verdict, captured stdout and results (its folder
    removed)."""
    limits = info["limits"]
    out_path = os.path.join(info["tmp"], "out.txt")
    cap = int(limits.get("stdout_chars", 4096))
    try:
        out_size = os.path.getsize(out_path)
        with open(out_path, "rb") as fh:
            stdout = fh.read(cap).decode("utf-8", "replace")
    except OSError:
        out_size, stdout = 0, ""
    shutil.rmtree(info["tmp"], ignore_errors=True)
    lines = bytes(info["buf"]).decode("utf-8", "replace").splitlines()
    status, reason = _classify(lines, wait_status, info["timed_out"], out_size, limits)
    results = []
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if "results" in data:
            results = data["results"] if isinstance(data["results"], list) else []
            break
    return {"job": info["index"], "status": status, "reason": reason, "stdout": stdout,
            "seconds": round(seconds, 6), "results": results}


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the zygote ends
    active, missing = layers()
    out = sys.stdout

    def emit(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    import gc

    gc.collect()
    gc.freeze()  # children never traverse the zygote's objects, so fewer pages are copied after fork
    emit({"hello": {"layers": active, "missing": missing, "pid": os.getpid()}})
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("quit"):
            break
        _run_batch(message, emit)
        emit({"done": message.get("batch")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
