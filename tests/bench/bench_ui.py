"""Desktop-app figures (prints them; not collected by pytest, no assertions).

    .venv/bin/python tests/bench/bench_ui.py [--steps 150] [--runs 5]

1. time to window: `python -m desktop_app --smoke-test` in fresh processes (wall time from spawn to the
   "window shown" line, and the in-process figure it prints);
2. event-loop latency during a real training run in the window: a 10 ms probe timer, lateness
   p50/p99/max;
3. training tokens/s of the same run in the window vs the headless CLI (same config; the CLI with its
   default threads and with the window's thread count);
4. (--case multi) event-loop lateness while the window follows a run it launched on 2 processes (torchrun, gloo):
   goal p99 under 50 ms.

    .venv/bin/python tests/bench/bench_ui.py --case multi [--steps 300]

Figures from a shared, busy 2-core machine are noisy: run it a few times and read medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def window_times(runs: int, env: dict[str, str], tree: Path = ROOT) -> list[tuple[float, float]]:
    """(wall seconds from spawn to "window shown", the in-process figure the app prints) of `runs` fresh
    `python -m desktop_app --smoke-test` processes of the app in `tree`."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "desktop_app", "--smoke-test"], cwd=tree, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("window shown in"):
                times.append((time.perf_counter() - t0, float(line.split()[3])))
                break
        proc.wait(120)
    return times


def time_to_window(runs: int, env: dict[str, str]) -> None:
    times = window_times(runs, env)
    walls, inside = [w for w, _ in times], [i for _, i in times]
    print(f"time to window (process spawn -> window shown), {runs} runs: median {statistics.median(walls):.3f} s, "
          f"min {min(walls):.3f}, max {max(walls):.3f}; in-process (app import -> shown) median "
          f"{statistics.median(inside):.3f} s")


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def prepare_dataset(folder: Path, context: int) -> Path:
    from desktop_app.engine.data.prepare import prepare_dataset as prep
    from desktop_app.engine.data.sample_corpus import sample_corpus_files
    from desktop_app.engine.specs import DataSpec

    out = folder / "dataset"
    *_, last = prep([str(p) for p in sample_corpus_files()], out, DataSpec(vocab_size=4096, context_length=context))
    assert last.reason == "completed", last
    return out


def run_config(dataset: Path, steps: int):
    from desktop_app.engine.data.token_store import TokenStore
    from desktop_app.engine.presets import preset
    from desktop_app.engine.specs import RunConfig, TrainSpec
    from desktop_app.engine.train.request import adapt_model_to_dataset

    spec, _ = adapt_model_to_dataset(preset("tiny"), TokenStore(dataset))
    train = TrainSpec(steps=steps, batch_size=16, eval_every=0, save_every=0, sample_tokens=0, warmup_steps=10)
    return RunConfig(model=spec.to_dict(), dataset=str(dataset), train=train.to_dict())


def open_window(config, folder: Path) -> tuple[object, object]:
    """The real window on a fresh workspace, offscreen, with the run's dataset and model chosen: (window, train tab)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from desktop_app.engine.specs import ModelSpec
    from desktop_app.engine.workspace import Workspace
    from desktop_app.ui.main_window import MainWindow
    from desktop_app.ui.theme import apply_theme

    app = QApplication.instance() or QApplication([])
    apply_theme(app)
    win = MainWindow(Workspace.open(folder), preload=False)
    win.ctx.dialogs_enabled = False
    win.resize(1280, 800)
    win.show()
    tab = win.train_tab
    tab.select_dataset(config.dataset)
    win.model_tab.set_spec(ModelSpec.from_dict(config.model))
    return win, tab


def in_app(config, work: Path, probe_ms: int = 10) -> tuple[list[float], list[float], int]:
    """Train in the real window (train tab, generic worker); probe the event loop every 10 ms."""
    win, tab = open_window(config, work / "ws")
    from PySide6.QtCore import QEventLoop, QTimer

    from desktop_app.engine.events import StepMetrics

    tab.form.set_spec(config.train_spec())
    tps: list[float] = []
    lateness: list[float] = []
    last = [0.0]
    started = [False]

    def on_item(item):
        if isinstance(item, StepMetrics):
            tps.append(item.metrics.get("tokens_per_s", 0.0))
            if item.step >= 5 and not started[0]:  # skip model build and the first optimizer step
                started[0] = True
                last[0] = time.perf_counter()

    def probe():
        now = time.perf_counter()
        if started[0] and last[0]:
            lateness.append(max(0.0, (now - last[0]) - 0.010))
        last[0] = now

    probe_timer = QTimer()
    probe_timer.setInterval(10)
    probe_timer.timeout.connect(probe)
    tab.start()
    tab.task.produced.connect(on_item)
    if probe_ms:
        probe_timer.start()
    loop = QEventLoop()  # the real event loop, as in the app (no busy polling)
    tab.task.finished.connect(loop.quit)
    loop.exec()
    probe_timer.stop()
    threads = tab.last_finished.result.get("threads", 0) if tab.last_finished and tab.last_finished.result else 0
    win.shutdown()
    win.close()
    return tps, lateness, threads


def in_app_multi(config, work: Path, nproc: int = 2) -> tuple[list[float], int]:
    """The window launches the run on `nproc` processes and follows rank 0's metrics; probe the event loop every
    10 ms from the first curve point to the run's end."""
    win, tab = open_window(config, work / "ws-multi")
    from PySide6.QtCore import QEventLoop, QTimer

    tab.setup.form.set_spec(config.train_spec())
    tab.setup.dist_form.set_value("nproc_per_node", nproc)  # off its default (1): the run starts on nproc processes
    lateness: list[float] = []
    last = [0.0]

    def probe():
        now = time.perf_counter()
        if last[0] and tab.run_view.plots.point_count("loss"):
            lateness.append(max(0.0, (now - last[0]) - 0.010))
        last[0] = now

    probe_timer = QTimer()
    probe_timer.setInterval(10)
    probe_timer.timeout.connect(probe)
    assert tab.start(), win.ctx.errors
    probe_timer.start()
    loop = QEventLoop()
    tab.task.finished.connect(loop.quit)
    loop.exec()
    probe_timer.stop()
    steps = tab.run_view.plots.point_count("loss")
    win.shutdown()
    win.close()
    return lateness, steps


def multi_case(work: Path, steps: int, context: int) -> None:
    from desktop_app.engine.devices import cpu_name

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    config = run_config(prepare_dataset(work, context), steps)
    config = config.replace(train={**config.train, "threads": 1})
    lateness, shown = in_app_multi(config, work)
    ms = [x * 1000 for x in lateness]
    print(f"{time.strftime('%Y-%m-%d')} · {cpu_name()} · {os.cpu_count()} CPUs")
    print(f"event-loop lateness while following a 2-process run ({shown} steps shown, {len(ms)} probes of 10 ms): "
          f"p50 {_percentile(ms, 0.5):.1f} ms, p99 {_percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms "
          f"(goal: p99 under 50 ms)")


def headless(config, work: Path, threads: int | None) -> list[float]:
    cfg = work / f"run-{threads}.json"
    if threads:
        config = config.replace(train={**config.train, "threads": threads})
    config.save(cfg)
    out = work / f"cli-run-{threads or 'auto'}-{time.monotonic_ns()}"
    proc = subprocess.run([sys.executable, "-m", "desktop_app", "train", "--config", str(cfg), "--out", str(out),
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        print(proc.stderr[-2000:])
        return []
    tps = []
    for line in proc.stdout.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("type") == "step" and "tokens_per_s" in rec:
            tps.append(rec["tokens_per_s"])
    return tps


def steady(values: list[float]) -> float:
    tail = values[len(values) // 5:] or values
    return statistics.median(tail) if tail else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--case", choices=("all", "multi"), default="all", help="multi: only the 2-process follow")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="azr-bench-ui-"))
    if args.case == "multi":
        os.environ["XDG_CONFIG_HOME"] = str(work / "cfg")
        multi_case(work, args.steps, args.context)
        return 0
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", AZR_WORKSPACE=str(work / "smoke-ws"),
               XDG_CONFIG_HOME=str(work / "cfg"))
    os.environ["XDG_CONFIG_HOME"] = str(work / "cfg")
    print(f"machine: {os.cpu_count()} CPUs (shared; figures are noisy)")
    time_to_window(args.runs, env)

    dataset = prepare_dataset(work, args.context)
    config = run_config(dataset, args.steps)
    from desktop_app.engine.devices import choose_threads

    app_threads, why = choose_threads(0, interactive=True)
    tps_cli_same = headless(config, work, app_threads)
    tps_app, lateness, _ = in_app(config, work)
    tps_app_quiet, _, _ = in_app(config, work, probe_ms=0)  # throughput without the probe's wake-ups
    ms = [x * 1000 for x in lateness]
    print(f"event-loop lateness during training ({len(ms)} probes of 10 ms): p50 {_percentile(ms, 0.5):.1f} ms, "
          f"p99 {_percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms")
    tps_cli_auto = headless(config, work, None)
    tps_cli_same2 = headless(config, work, app_threads)  # twice, around the app runs: drift on a shared machine
    a, aq = steady(tps_app), steady(tps_app_quiet)
    c1, c2 = statistics.median([steady(tps_cli_same), steady(tps_cli_same2)]), steady(tps_cli_auto)
    print(f"tokens/s (median after warm-up): app {aq:,.0f} without probe, {a:,.0f} with the 10 ms probe ({why}); "
          f"CLI same threads {c1:,.0f} -> app/CLI {aq / c1:.3f}x; CLI default (all cores) {c2:,.0f} -> "
          f"app/CLI {aq / c2:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
