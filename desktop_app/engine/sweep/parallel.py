"""Several trials at once, where the machine has room: one trial per GPU, or on the CPU as many as its cores and the
memory estimate allow (each with its share of the cores as torch threads), never more than fit.

Each trial at once is a child process running the `train` verb on the trial's folder (`train --config TRIAL/run.json
--out TRIAL --json`, or `train --resume TRIAL --json` for an interrupted one), as the launcher starts torchrun: the
one run entry, its own threads (OMP_NUM_THREADS and the run's `threads`), its events read from its stdout and its
stderr kept in TRIAL/trial.log. This process alone talks to the study: it reports each child's evaluations, asks the
pruner, and stops a pruned child as Ctrl+C would (it saves and ends). The sweep's stop, pause and save-now reach every
child as the CLI's signals. On Linux a child dies with this process (a killed sweep leaves no trial training behind);
elsewhere it ends at its next step, when its output has nowhere to go.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from desktop_app.engine import run_folder
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Log, event_from_dict
from desktop_app.engine.session import ResumeRun
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep.events import TrialStarted
from desktop_app.engine.sweep.space import Dimension, apply
from desktop_app.engine.sweep.trials import SweepRun, TrialPlan, TrialWatch, conclude, plan_trial, take_next
from desktop_app.engine.train.launcher import child_env
from desktop_app.engine.train.memory_plan import FITS_SHARE, memory_plan, this_machine

TRIAL_LOG = "trial.log"
# Settings whose largest value makes a trial heaviest in memory: the estimate takes each at its top.
HEAVY = ("train.batch_size", "train.micro_batch_size", "adapter.rank", "model.d_model", "model.n_layers",
         "model.ffn_dim", "model.n_heads")
STOP_WAIT_S = 120.0  # a child asked to stop saves first; after this it is killed


@dataclass(frozen=True)
class Slots:
    """How many trials run at once, each one's CPU threads (0: as its config says), the GPUs they take, and why."""

    n: int
    threads: int = 0
    gpus: tuple[int, ...] = ()
    reason: str = ""


def plan_slots(asked: int, base: RunConfig, dims: list[Dimension], *, cores: int | None = None,
               free: int | None = None, gpus: int | None = None) -> Slots:
    """Trials at once for `asked` (0: as many as fit) on this machine (`cores`, `free` RAM bytes and `gpus` given by
    tests; else measured)."""
    device = base.train_spec().device
    if gpus is None:
        gpus = count_gpus(device)
    if gpus and device in ("auto", "cuda"):
        n = min(asked or gpus, gpus)
        why = f"one trial per GPU ({gpus} here)" + (f"; {asked} asked" if asked > gpus else "")
        return Slots(n, 0, tuple(range(n)), f"{n} trial(s) at once: {why}")
    cores = cores or cpu_cores()
    need = heaviest_memory(base, dims)
    free = this_machine(probe_gpu=False).ram_free if free is None else free
    fit = max(1, int(free * FITS_SHARE // need)) if need and free else cores
    n = max(1, min(asked or cores, cores, fit))
    threads = max(1, cores // n)
    memory = f"about {need / 2**20:,.0f} MiB each, {free / 2**20:,.0f} MiB free" if need and free else \
        "memory not estimated"
    limit = "" if not asked or n >= asked else f" ({asked} asked: " + (
        "more than the cores" if asked > cores and n == cores else "more than fit in memory") + ")"
    return Slots(n, threads, (), f"{n} trial(s) at once{limit}, {threads} CPU thread(s) each ({cores} cores; {memory})")


def count_gpus(device: str) -> int:
    if device not in ("auto", "cuda"):
        return 0
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def cpu_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def heaviest_memory(base: RunConfig, dims: list[Dimension]) -> int:
    """The memory estimate of the heaviest trial the space holds (0 where it cannot be estimated)."""
    top = {d.path: max(d.grid() if d.choices else (d.high,)) for d in dims if d.path in HEAVY}
    try:
        config = RunConfig.from_dict(apply(base.to_dict(), {k: int(v) for k, v in top.items()}))
        plan = memory_plan(config, config.train_spec(), on_gpu=False)
    except (UserError, ValueError, TypeError, KeyError, OSError):
        return 0
    return plan.total() if plan is not None else 0


# --- the children ---------------------------------------------------------------------------------------------------

@dataclass
class Child:
    """One trial training in a child process."""

    plan: TrialPlan
    watch: TrialWatch
    proc: subprocess.Popen[str]
    log: IO[str]
    gpu: int | None = None
    stopping: bool = False
    error: str = ""
    signals: list[int] = field(default_factory=list)

    def stop(self) -> None:
        if not self.stopping and self.proc.poll() is None:
            self.stopping = True
            send(self.proc, "SIGTERM")


def send(proc: subprocess.Popen[str], name: str) -> None:
    """A signal the `train` verb answers (SIGTERM: stop and save; SIGUSR1: save now; SIGUSR2: pause / go on)."""
    number = getattr(signal, name, None)
    with contextlib.suppress(ProcessLookupError, OSError):
        if number is None:
            if name == "SIGTERM":
                proc.terminate()
            return
        proc.send_signal(number)


def child_argv(plan: TrialPlan) -> list[str]:
    """The `train` command of a trial (a frozen app is its own CLI)."""
    folder = plan.run_dir
    if isinstance(plan.what, ResumeRun):
        verb = ["--resume", str(folder)]
    else:
        assert plan.what is not None and plan.what.config is not None
        RunConfig.from_dict(plan.what.config).save(folder / run_folder.RUN_FILE)
        verb = ["--config", str(folder / run_folder.RUN_FILE), "--out", str(folder)]
    cli = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m", "desktop_app"]
    return [*cli, "train", *verb, "--json"]


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child is killed when the sweep's process dies (kill -9 included)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_child(run: SweepRun, plan: TrialPlan, slots: Slots, gpu: int | None, lines: queue.Queue) -> Child:
    env = child_env(slots.n)
    if slots.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(slots.threads)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    log = open(plan.run_dir / TRIAL_LOG, "a", encoding="utf-8")  # noqa: SIM115 - closed when the child ends
    proc = subprocess.Popen(child_argv(plan), stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                            env=env, preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put((plan.number, line))
        lines.put((plan.number, None))

    threading.Thread(target=read, name=f"azr-sweep-trial-{plan.number}", daemon=True).start()
    return Child(plan, TrialWatch(run, plan), proc, log, gpu)


def last_error(log_file: Path) -> str:
    """The one line a failed `train` printed last (its error), from the trial's log."""
    try:
        lines = [ln.strip() for ln in log_file.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or [""])[-1][:500]


class Children:
    """The trials training now, fed from the study until the sweep has its trials, and their events as one stream."""

    def __init__(self, run: SweepRun, controls: Controls, slots: Slots):
        self.run, self.controls, self.slots = run, controls, slots
        self.active: dict[int, Child] = {}
        self.lines: queue.Queue = queue.Queue()
        self.paused = False

    def fill(self) -> Iterator[Event]:
        """Start trials while there is room and the sweep wants more."""
        while not self.controls.stop.is_set() and len(self.active) < self.slots.n:
            nxt = take_next(self.run, len(self.active))
            if nxt is None:
                return
            plan = plan_trial(self.run, *nxt)
            yield TrialStarted(plan.number, dict(plan.trial.params), str(plan.run_dir), plan.resumed)
            if plan.done is not None:
                yield plan.done
                continue
            used = {c.gpu for c in self.active.values()}
            gpu = next((g for g in self.slots.gpus if g not in used), None)
            try:
                self.active[plan.number] = start_child(self.run, plan, self.slots, gpu, self.lines)
            except (UserError, OSError) as exc:  # its settings make no run config, or its folder cannot be written
                yield conclude(self.run, plan, None, error=str(exc))

    def take(self, number: int, line: str | None) -> Iterator[Event]:
        child = self.active[number]
        if line is None:
            yield self.end(child)
            return
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            event = event_from_dict(record) if isinstance(record, dict) else None
            if event is None:
                return
            report = child.watch.take(event)
            if report is not None:
                yield report
                if report.pruned:
                    child.stop()
            elif isinstance(event, Log) and event.level != "info" and not event.message.startswith("check before"):
                yield Log(event.level, f"trial {number}: {event.message}")  # the base run was checked once

    def end(self, child: Child) -> Event:
        try:
            code = child.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            code = child.proc.wait()
        child.log.close()
        del self.active[child.plan.number]
        error = "" if code == 0 or self.controls.stop.is_set() else (
            last_error(child.plan.run_dir / TRIAL_LOG) or f"its process ended with exit code {code}")
        return conclude(self.run, child.plan, child.watch, error=error, stopped=self.controls.stop.is_set())

    def follow_controls(self) -> None:
        """The sweep's flags as signals to every child: stop, pause / go on, save now."""
        children = list(self.active.values())
        if self.controls.stop.is_set():
            for child in children:
                child.stop()
        if self.controls.pause.is_set() != self.paused:
            self.paused = self.controls.pause.is_set()
            for child in children:
                send(child.proc, "SIGUSR2")
        if self.controls.save_now.is_set():
            self.controls.save_now.clear()
            for child in children:
                send(child.proc, "SIGUSR1")

    def close(self) -> None:
        """Leaving early (the window closes): every child stops and saves, killed if it does not end in time."""
        for child in list(self.active.values()):
            child.stop()
        for child in list(self.active.values()):
            try:
                child.proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                child.proc.kill()
            child.log.close()


def run_children(run: SweepRun, controls: Controls, slots: Slots) -> Iterator[Event]:
    """The sweep's trials, `slots.n` at once in child processes, until it has its trials or is stopped."""
    children = Children(run, controls, slots)
    try:
        while True:
            yield from children.fill()
            if not children.active:
                return
            children.follow_controls()
            try:
                number, line = children.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            yield from children.take(number, line)
    finally:
        children.close()
