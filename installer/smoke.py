"""The smoke test of the installed app (`python installer/build.py --smoke`): every CLI verb and the window.

Runs the *installed* executable as a fresh user (temporary HOME, workspace and caches, no hub access,
offscreen Qt). Each step is one function `step_<name>(ctx) -> figures` listed in STEPS; a failing step is
recorded and the others still run (those that need its output fail fast, saying so). Every verb of
`desktop_app.cli.VERBS` must have a step: tests/installer checks it. To cover a new verb, write its step and
add it to STEPS and STEP_VERBS.

Stdlib only: it runs with the build's Python, next to build.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import build_config as cfg

ROOT = cfg.REPO_ROOT
IS_LINUX = sys.platform.startswith("linux")
IS_WIN = sys.platform.startswith("win")


def log(msg: str) -> None:
    print(f"[smoke] {msg}", flush=True)


class SmokeFailure(RuntimeError):
    pass


@dataclass
class Ran:
    out: str
    err: str
    seconds: float
    arrivals: list[float]  # when stdout chunks arrived (seconds from launch)
    code: int


@dataclass
class Context:
    meta: cfg.AppMeta
    exe: Path
    install_root: Path
    scratch: Path
    repeats: int
    env: dict[str, str] = field(default_factory=dict)
    work: Path = Path()
    corpus: Path = Path()
    made: dict[str, Path] = field(default_factory=dict)  # what one step leaves for the next (dataset, run)

    def needs(self, name: str) -> Path:
        if name not in self.made:
            raise SmokeFailure(f"needs the {name} an earlier step makes, and that step failed")
        return self.made[name]


def smoke_env(scratch: Path) -> dict[str, str]:
    """A clean user: workspace, home and caches in a temp dir; offscreen Qt; no hub access."""
    home = scratch / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(key, None)
    env.update(
        AZR_WORKSPACE=str(scratch / "workspace"),
        HOME=str(home),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        HF_HOME=str(home / ".cache" / "huggingface"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        QT_QPA_PLATFORM="offscreen",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
    )
    return env


def snapshot(path: Path) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of everything under `path`, to prove nothing was written there."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, path)] = (st.st_size if not os.path.isdir(p) else 0, st.st_mtime_ns)
    return out


def run_app(cmd: Sequence[str | os.PathLike[str]], env: dict[str, str], timeout: float = 600,
            cwd: Path | None = None, marker: str | None = None, expect: int | None = 0) -> Ran:
    """Run, collecting stdout as it arrives. With `marker`, the arrival times stop at the chunk where that
    text first appears (when the process printed it, measured from the launch, the bootloader included).
    `expect`: the exit status required (None: any)."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, cwd=cwd)
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        proc.kill()

    watchdog = threading.Timer(timeout, _kill)
    watchdog.start()
    err_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    reader.start()
    out_chunks: list[bytes] = []
    arrivals: list[float] = []
    try:
        marked = False
        while chunk := os.read(proc.stdout.fileno(), 65536):
            out_chunks.append(chunk)
            if not marked:
                arrivals.append(time.perf_counter() - start)
                marked = bool(marker) and marker.encode() in b"".join(out_chunks)
        code = proc.wait()
    finally:
        watchdog.cancel()
    if timed_out.is_set():
        raise SmokeFailure(f"timed out after {timeout} s: {' '.join(str(c) for c in cmd)}")
    reader.join(10)
    ran = Ran(b"".join(out_chunks).decode("utf-8", "replace"), b"".join(err_chunks).decode("utf-8", "replace"),
              time.perf_counter() - start, arrivals, code)
    if expect is not None and code != expect:
        raise SmokeFailure(f"exit {code} (expected {expect}): {' '.join(str(c) for c in cmd)}\n--- stdout\n"
                           f"{ran.out[-3000:]}\n--- stderr\n{ran.err[-3000:]}")
    return ran


def time_to_window(cmd: list[str], env: dict[str, str], repeats: int) -> dict[str, object]:
    """`--smoke-test` runs: the app's own figure (from its first import) and the whole process wall time."""
    reported, seen, walls = [], [], []
    for _ in range(repeats):
        ran = run_app([*cmd, "--smoke-test"], env, timeout=300, marker="window shown in")
        match = re.search(r"window shown in ([0-9.]+)\s*s", ran.out)
        if not match:
            raise SmokeFailure(f"--smoke-test printed no 'window shown in N s' line:\n{ran.out[-2000:]}")
        reported.append(float(match.group(1)))
        seen.append(round(ran.arrivals[-1] if ran.arrivals else ran.seconds, 3))
        walls.append(round(ran.seconds, 3))
    return {"app_reported_s": reported, "process_to_window_s": seen, "process_wall_s": walls,
            "median_app_reported_s": statistics.median(reported),
            "median_process_to_window_s": statistics.median(seen),
            "median_process_wall_s": statistics.median(walls)}


def missing_libraries(app_dir: Path) -> dict[str, list[str]]:
    """ldd every shared object in the bundle; list unresolved dependencies (Linux only)."""
    missing: dict[str, list[str]] = {}
    if not shutil.which("ldd"):
        return missing
    internal = app_dir / "_internal"
    for so in internal.rglob("*.so*"):
        if so.is_symlink() or not so.is_file():
            continue
        try:
            out = subprocess.run(["ldd", str(so)], capture_output=True, text=True, timeout=30,
                                 env=dict(os.environ, LD_LIBRARY_PATH=str(internal))).stdout
        except (subprocess.SubprocessError, OSError):
            continue
        gone = [line.split("=>")[0].strip() for line in out.splitlines() if "not found" in line]
        if gone:
            missing[str(so.relative_to(app_dir))] = gone
    return missing


def source_cmd() -> list[str]:
    return [sys.executable, "-m", "desktop_app"]


def source_env(ctx: Context) -> dict[str, str]:
    return dict(ctx.env, PYTHONPATH=str(ROOT))


# --- the steps ----------------------------------------------------------------------------------------


def step_version(ctx: Context) -> dict[str, object]:
    ran = run_app([ctx.exe, "--version"], ctx.env, timeout=120)
    if ctx.meta.version not in ran.out + ran.err:
        raise SmokeFailure(f"--version printed {ran.out + ran.err!r}, expected {ctx.meta.version}")
    return {"seconds": round(ran.seconds, 2)}


def step_window(ctx: Context) -> dict[str, object]:
    return {"frozen": time_to_window([str(ctx.exe)], ctx.env, ctx.repeats),
            "source": time_to_window(source_cmd(), source_env(ctx), ctx.repeats)}


def step_model(ctx: Context) -> dict[str, object]:
    ran = run_app([ctx.exe, "model", "--preset", "tiny", "--json"], ctx.env, cwd=ctx.work, timeout=300)
    info = json.loads(ran.out)
    return {"seconds": round(ran.seconds, 1), "params": info.get("params")}


def step_prepare(ctx: Context) -> dict[str, object]:
    dataset = ctx.work / "dataset"
    ran = run_app([ctx.exe, "prepare", ctx.corpus, "--out", dataset], ctx.env, cwd=ctx.work)
    if not (dataset / "manifest.json").is_file():
        raise SmokeFailure(f"prepare wrote no manifest.json into {dataset}")
    ctx.made["dataset"] = dataset
    return {"seconds": round(ran.seconds, 1)}


def step_train(ctx: Context) -> dict[str, object]:
    run_dir = ctx.work / "run"
    ran = run_app([ctx.exe, "train", "--dataset", ctx.needs("dataset"), "--preset", "tiny", "--steps", "3",
                   "--out", run_dir], ctx.env, cwd=ctx.work)
    if not list((run_dir / "checkpoints").glob("step-*/manifest.json")):
        raise SmokeFailure(f"train left no committed checkpoint under {run_dir / 'checkpoints'}")
    ctx.made["run"] = run_dir
    return {"seconds": round(ran.seconds, 1)}


def step_generate(ctx: Context) -> dict[str, object]:
    ran = run_app([ctx.exe, "generate", ctx.needs("run"), "--prompt", "The", "--max-new-tokens", "20"], ctx.env,
                  cwd=ctx.work)
    if not ran.out.strip():
        raise SmokeFailure("generate printed no text")
    return {"seconds": round(ran.seconds, 1), "stdout_chunks": len(ran.arrivals), "text": ran.out[-300:]}


# name -> (source, the statuses that pass). The hostile ones try a socket, /etc/passwd and fork: through
# an import the static screen refuses, and through `typing.sys` (past the screen) into the runtime layers.
SANDBOX_PROGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ok.py": ("print(sum(range(10)))\n", ("ok",)),
    "socket_import.py": ("import socket\nsocket.create_connection(('127.0.0.1', 9))\n", ("forbidden",)),
    "passwd_builtin.py": ("print(open('/etc/passwd').read())\n", ("forbidden", "error")),
    "passwd_runtime.py": ("import typing\nos = typing.sys.modules['os']\nprint(os.read(os.open('/etc/passwd', 0), "
                          "100))\n", ("forbidden",)),
    "fork_runtime.py": ("import typing\ntyping.sys.modules['os'].fork()\nprint('forked')\n", ("forbidden",)),
}


def _sandbox(cmd: list[str], env: dict[str, str], folder: Path, names: list[str]) -> tuple[dict, dict, float]:
    ran = run_app([*cmd, "sandbox", *names, "--json", "--timeout", "5"], env, cwd=folder, timeout=300)
    records = [json.loads(line) for line in ran.out.splitlines() if line.startswith("{")]
    return {r["file"]: r for r in records if "file" in r}, records[-1], ran.seconds


# What a program can see of the fork server's modules (through `typing.sys`): the frozen one should hold
# what the source one holds (its runtime hook runs before the packages' hooks import anything).
MODULES_PROGRAM = "import typing\nprint(' '.join(sorted(typing.sys.modules)))\n"


def step_sandbox(ctx: Context) -> dict[str, object]:
    folder = ctx.work / "sandbox"
    folder.mkdir(exist_ok=True)
    for name, (source, _) in SANDBOX_PROGRAMS.items():
        (folder / name).write_text(source, encoding="utf-8")
    (folder / "modules.py").write_text(MODULES_PROGRAM, encoding="utf-8")
    if IS_WIN:  # no fork on Windows: the same one-line refusal as from source
        ran = run_app([ctx.exe, "sandbox", "ok.py"], ctx.env, cwd=folder, expect=2)
        return {"refused": ran.err.strip()}
    verdicts, state, seconds = _sandbox([str(ctx.exe)], ctx.env, folder, [*SANDBOX_PROGRAMS, "modules.py"])
    frozen_modules = set(verdicts.pop("modules.py")["stdout"].split())
    wrong = {n: verdicts.get(n, {}).get("status") for n, (_, ok) in SANDBOX_PROGRAMS.items()
             if verdicts.get(n, {}).get("status") not in ok}
    if wrong:
        raise SmokeFailure(f"sandbox verdicts: {wrong} ({json.dumps(verdicts)[:1500]})")
    if verdicts["ok.py"]["stdout"].strip() != "45":
        raise SmokeFailure(f"the good program printed {verdicts['ok.py']['stdout']!r}, not 45")
    if any("root:" in v["stdout"] or "forked" in v["stdout"] for v in verdicts.values()):
        raise SmokeFailure("a hostile program got through: " + json.dumps(verdicts)[:1500])
    source_verdicts, source_state, _ = _sandbox(source_cmd(), source_env(ctx), folder, ["ok.py", "modules.py"])
    if (state["layers"], sorted(state["missing"])) != (source_state["layers"], sorted(source_state["missing"])):
        raise SmokeFailure(f"the frozen sandbox's layers differ from the source's: {state} vs {source_state}")
    source_modules = set(source_verdicts["modules.py"]["stdout"].split())
    ctx.made["sandbox_layers"] = state["layers"]
    return {"seconds": round(seconds, 1), "verdicts": {n: v["status"] for n, v in verdicts.items()},
            "layers": state["layers"], "missing": state["missing"], "same_as_source": True,
            "fork_server_modules": {"frozen": len(frozen_modules), "source": len(source_modules),
                                    "only_frozen": sorted(frozen_modules - source_modules),
                                    "only_source": sorted(source_modules - frozen_modules)}}


def step_tasks(ctx: Context) -> dict[str, object]:
    ran = run_app([ctx.exe, "tasks", "--world", "python", "--type", "deduction", "--count", "3"], ctx.env,
                  cwd=ctx.work, timeout=300, expect=2 if IS_WIN else 0)
    if IS_WIN:
        return {"refused": ran.err.strip()}
    tasks = [json.loads(line) for line in ran.out.splitlines() if line.strip()]
    if len(tasks) != 3 or not all({"program", "input", "output"} <= set(t) for t in tasks):
        raise SmokeFailure(f"tasks printed {ran.out[:1000]!r}")
    return {"seconds": round(ran.seconds, 1), "first_program": tasks[0]["program"][:120]}


def step_selfplay_demo(ctx: Context) -> dict[str, object]:
    out = ctx.work / "demo"
    ran = run_app([ctx.exe, "selfplay-demo", "--minutes", "1", "--out", out, "--json"], ctx.env, cwd=ctx.work,
                  timeout=600)
    events = [json.loads(line) for line in ran.out.splitlines() if line.startswith("{")]
    finished = [e for e in events if e.get("type") == "finished"]
    if not finished or finished[-1].get("reason") != "completed":
        raise SmokeFailure(f"selfplay-demo did not complete: {ran.out[-1500:]}")
    result = finished[-1].get("result") or {}
    return {"seconds": round(ran.seconds, 1), "before": result.get("before"), "final": result.get("final")}


def step_eval(ctx: Context) -> dict[str, object]:
    """The run `train` made on held-out mini tasks and on its own dataset's text: one JSON object per model."""
    ran = run_app([ctx.exe, "eval", ctx.needs("run"), "--world", "mini", "--per-type", "8", "--text",
                   ctx.needs("dataset"), "--max-text-bytes", "8000", "--json"], ctx.env, cwd=ctx.work, timeout=600)
    rows = [json.loads(line) for line in ran.out.splitlines() if line.startswith("{")]
    keys = {"model", "solve_rate/deduction", "solve_rate/abduction", "solve_rate/induction", "bits_per_byte",
            "perplexity"}
    if len(rows) != 1 or not keys <= set(rows[0]):
        raise SmokeFailure(f"eval printed {ran.out[-1500:]!r}")
    return {"seconds": round(ran.seconds, 1), "bits_per_byte": rows[0]["bits_per_byte"],
            "solve_rate": rows[0].get("solve_rate")}


def step_serve(ctx: Context) -> dict[str, object]:
    run_dir = ctx.needs("run")
    start = time.perf_counter()
    proc = subprocess.Popen([str(ctx.exe), "serve", str(run_dir), "--port", "0"], env=ctx.env, cwd=ctx.work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    errors: list[str] = []
    threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True).start()
    try:
        url = _wait_for_url(proc, timeout=300)
        ready = time.perf_counter() - start
        models = json.loads(urllib.request.urlopen(f"{url}/v1/models", timeout=60).read())
        model = models["data"][0]["id"]
        body = json.dumps({"model": model, "prompt": "The", "max_tokens": 8, "temperature": 0}).encode()
        request = urllib.request.Request(f"{url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        reply = json.loads(urllib.request.urlopen(request, timeout=120).read())
        text = reply["choices"][0]["text"]
        if not isinstance(text, str) or not reply.get("usage", {}).get("completion_tokens"):
            raise SmokeFailure(f"serve answered {reply}")
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise SmokeFailure(f"serve: {type(exc).__name__}: {exc}; stderr: {''.join(errors)[-1500:]}") from None
    finally:
        if proc.poll() is None:  # SIGTERM: finish the requests in flight, exit 0 (Windows: no SIGTERM)
            proc.terminate() if IS_WIN else proc.send_signal(signal.SIGTERM)
        code = _wait(proc, 60)
    if code != 0 and not IS_WIN:
        raise SmokeFailure(f"serve exited {code} after SIGTERM: {''.join(errors)[-1500:]}")
    return {"ready_s": round(ready, 1), "model": model, "completion": text, "exit_after_sigterm": code}


def _wait_for_url(proc: subprocess.Popen, timeout: float) -> str:
    found: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            match = re.search(r"serving on (http://\S+)", line)
            if match:
                found.append(match.group(1).rstrip("/"))
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not found:
        raise SmokeFailure(f"serve printed no 'serving on URL' line in {timeout} s (exit {proc.poll()})")
    return found[0]


def _wait(proc: subprocess.Popen, timeout: float) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def step_export(ctx: Context) -> dict[str, object]:
    out = ctx.work / "model.gguf"
    ran = run_app([ctx.exe, "export", ctx.needs("run"), "--format", "gguf", "--out", out], ctx.env, cwd=ctx.work,
                  timeout=600)
    if not out.is_file() or out.read_bytes()[:4] != b"GGUF":
        raise SmokeFailure(f"export wrote no GGUF file at {out}")
    return {"seconds": round(ran.seconds, 1), "bytes": out.stat().st_size}


def step_models(ctx: Context) -> dict[str, object]:
    """A fresh user's Hugging Face cache lists nothing, and the network switch refuses a search in one line."""
    listed = run_app([ctx.exe, "models", "list", "--json"], ctx.env, cwd=ctx.work, timeout=120)
    if listed.out.strip():
        raise SmokeFailure(f"models list found models in a fresh user's cache: {listed.out[:500]!r}")
    refused = run_app([ctx.exe, "models", "search", "smollm2"], {**ctx.env, "AZR_NETWORK": "off"},
                      cwd=ctx.work, timeout=120, expect=2)
    if "network features are off" not in refused.err:
        raise SmokeFailure(f"models search with AZR_NETWORK=off printed {refused.err[-500:]!r}")
    return {"seconds": round(listed.seconds + refused.seconds, 1), "refused": refused.err.strip()}


def step_benchmarks(ctx: Context) -> dict[str, object]:
    """The popular benchmarks are listed without the [benchmarks] extra; fetching their data says in one line what
    is missing (the extra, in a bundle without it) or that the network is off."""
    listed = run_app([ctx.exe, "benchmarks", "list"], ctx.env, cwd=ctx.work, timeout=120)
    if "mmlu" not in listed.out or "hellaswag" not in listed.out:
        raise SmokeFailure(f"benchmarks list did not list the popular benchmarks: {listed.out[:800]!r}")
    refused = run_app([ctx.exe, "benchmarks", "fetch", "arc_easy"], {**ctx.env, "AZR_NETWORK": "off"},
                      cwd=ctx.work, timeout=300, expect=2)
    err = refused.err.strip()
    if len(err.splitlines()) != 1 or not ("lm-evaluation-harness" in err or "network features are off" in err):
        raise SmokeFailure(f"benchmarks fetch with AZR_NETWORK=off printed {refused.err[-800:]!r}")
    return {"seconds": round(listed.seconds + refused.seconds, 1), "refused": err}


def step_runs(ctx: Context) -> dict[str, object]:
    """`train`'s run compared with a 2-step run at another learning rate: the comparison names the lr that differs."""
    other = ctx.work / "run-lr"
    trained = run_app([ctx.exe, "train", "--dataset", ctx.needs("dataset"), "--preset", "tiny", "--steps", "2",
                       "--lr", "0.0001", "--out", other], ctx.env, cwd=ctx.work)
    ran = run_app([ctx.exe, "runs", "compare", ctx.needs("run"), other, "--json"], ctx.env, cwd=ctx.work, timeout=120)
    data = json.loads(ran.out)
    keys = [d.get("key") for d in data.get("differences", [])]
    if "train.lr" not in keys or not any(m.get("name") == "loss" for m in data.get("metrics", [])):
        raise SmokeFailure(f"runs compare found no lr difference or no loss: {ran.out[:1500]}")
    return {"seconds": round(trained.seconds + ran.seconds, 1), "labels": [r.get("label") for r in data["runs"]]}


def step_sweep(ctx: Context) -> dict[str, object]:
    """Two trials of `train`'s run config at other learning rates (Optuna, the sweep extra): the best one named. A
    build without Optuna says so in one line (exit 2), which is what the step then checks."""
    ran = run_app([ctx.exe, "sweep", "--config", ctx.needs("run") / "run.json", "--vary", "lr=1e-4..1e-2:log",
                   "--trials", "2", "--out", ctx.work / "sweep", "--json"], ctx.env, cwd=ctx.work, expect=None)
    if ran.code == 2 and "need Optuna" in ran.err and len(ran.err.strip().splitlines()) == 1:
        return {"seconds": round(ran.seconds, 1), "optuna": "not in this build", "line": ran.err.strip()}
    records = [json.loads(line) for line in ran.out.splitlines() if line.startswith("{")]
    last = records[-1] if records else {}
    if ran.code != 0 or last.get("reason") != "completed" or not (last.get("result") or {}).get("best"):
        raise SmokeFailure(f"sweep did not complete with a best trial (exit {ran.code}): {ran.err[-1500:]}")
    return {"seconds": round(ran.seconds, 1), "best": last["result"]["best"]["params"]}


# user mistakes: one line on stderr, exit 2, never a traceback (as from source)
USER_ERRORS = (
    ["sandbox", "no-such-program.py"], ["tasks", "--count", "0"], ["generate", "no-such-run", "--prompt", "x"],
    ["export", "no-such-run", "--format", "gguf", "--out", "x.gguf"], ["train", "--dataset", "no-such"],
    ["runs", "compare", "no-such-run", "no-such-run-2"],
)


def step_errors(ctx: Context) -> dict[str, object]:
    lines = {}
    for argv in USER_ERRORS:
        ran = run_app([ctx.exe, *argv], ctx.env, cwd=ctx.work, timeout=300, expect=2)
        err = ran.err.strip()
        if "Traceback" in ran.err or len(err.splitlines()) != 1 or not err.startswith("error"):
            raise SmokeFailure(f"`{' '.join(argv)}` printed more than one error line:\n{ran.err[-2000:]}")
        lines[" ".join(argv)] = err
    return {"one_line_errors": lines}


def step_window_selfplay(ctx: Context) -> dict[str, object]:
    ran = run_app([ctx.exe, "--smoke-selfplay", ctx.needs("run")], ctx.env, cwd=ctx.work, timeout=900, expect=None)
    lines = [line for line in ran.out.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    if ran.code != 0 or result.get("failure", "no result") != "":
        raise SmokeFailure(f"self-play in the window failed (exit {ran.code}): {ran.out[-2000:]}\n{ran.err[-1500:]}")
    layers = result.get("tab_sandbox", {}).get("layers")
    if "sandbox_layers" in ctx.made and layers != ctx.made["sandbox_layers"]:
        raise SmokeFailure(f"the window's sandbox layers {layers} differ from the CLI's {ctx.made['sandbox_layers']}")
    return {"seconds": round(ran.seconds, 1), "steps_seen": result.get("steps_seen"),
            "finished": result.get("finished"), "layers": len(layers or []),
            "missing": result.get("tab_sandbox", {}).get("missing")}


# Order matters: prepare -> train -> generate/serve/export/window-selfplay use the run train makes.
STEPS: tuple[tuple[str, Callable[[Context], dict[str, object]]], ...] = (
    ("version", step_version), ("window", step_window), ("model", step_model), ("prepare", step_prepare),
    ("train", step_train), ("generate", step_generate), ("sandbox", step_sandbox), ("tasks", step_tasks),
    ("selfplay-demo", step_selfplay_demo), ("eval", step_eval), ("serve", step_serve), ("export", step_export),
    ("models", step_models), ("benchmarks", step_benchmarks), ("runs", step_runs), ("sweep", step_sweep),
    ("errors", step_errors), ("window-selfplay", step_window_selfplay),
)
# The CLI verbs the steps run (desktop_app.cli.VERBS must all be here).
STEP_VERBS = ("model", "prepare", "train", "generate", "sandbox", "tasks", "selfplay-demo", "eval", "serve", "export",
              "models", "benchmarks", "runs", "sweep")


def run_smoke(meta: cfg.AppMeta, *, exe: Path, install_root: Path, scratch: Path, repeats: int,
              only: Sequence[str] = ()) -> dict[str, object]:
    """Every step (or those named in `only`); figures per step. Raises SmokeFailure naming the failed steps."""
    ctx = Context(meta, exe, install_root, scratch, repeats, env=smoke_env(scratch), work=scratch / "cli")
    ctx.work.mkdir(parents=True, exist_ok=True)
    resources = install_root / "_internal" / "resources"
    if not resources.is_dir():  # macOS: PyInstaller's BUNDLE puts data under Contents/Resources|Frameworks
        found = [p for p in install_root.rglob("resources") if (p / "sample_corpus").is_dir()]
        resources = found[0] if found else resources
    ctx.corpus = resources / "sample_corpus"
    if not ctx.corpus.is_dir():
        raise SmokeFailure(f"the bundle has no sample corpus at {ctx.corpus}")
    before = snapshot(install_root)
    figures: dict[str, object] = {"steps": {}}
    failed = []
    start = time.perf_counter()
    for name, step in STEPS:
        if only and name not in only:
            continue
        log(f"{name} ...")
        t0 = time.perf_counter()
        try:
            record: dict[str, object] = {"passed": True, **step(ctx)}
        except Exception as exc:  # SmokeFailure, or output the step could not read
            error = str(exc) if isinstance(exc, SmokeFailure) else f"{type(exc).__name__}: {exc}"
            record, failed = {"passed": False, "error": error[:4000]}, [*failed, name]
        record["step_s"] = round(time.perf_counter() - t0, 1)
        figures["steps"][name] = record
        log(f"{name}: {'passed' if record['passed'] else 'FAILED'} in {record['step_s']} s"
            + ("" if record["passed"] else f"\n{record['error']}"))
    figures["smoke_s"] = round(time.perf_counter() - start, 1)
    after = snapshot(install_root)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    figures["install_tree_unchanged"] = not changed
    if changed:
        failed.append("install-tree")
        figures["install_tree_changes"] = changed[:20]
    if IS_LINUX:
        figures["missing_libraries"] = missing_libraries(install_root)  # not exe.parent: /usr/bin on a .deb
    figures["failed_steps"] = failed
    if failed:
        raise SmokeFailureWithFigures(f"failed: {', '.join(failed)}", figures)
    return figures


class SmokeFailureWithFigures(SmokeFailure):
    def __init__(self, message: str, figures: dict[str, object]):
        super().__init__(message)
        self.figures = figures
