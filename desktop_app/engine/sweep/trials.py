"""One trial of a sweep, whichever process trains it: which trial comes next (an interrupted one first), its run (a new
run of the base config with the trial's settings, or its own run continued), its reports to the pruner, and its
verdict told to the study from what its run folder recorded.

A trial's run goes through the one run entry (engine/session.py) like any run, into SWEEP/trials/trial-NNNN. Its
verdict is read from that folder's metrics.jsonl, so it is the same whether the trial ran here, in a child process,
or before a crash: complete (its value: the best figure it reported), pruned, failed, or interrupted (the sweep
stopped or died: the trial stays RUNNING in the study, and the next resume continues its run from its newest
checkpoint, under the same number, so no trial is lost and none runs twice).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.events import Controls, Event
from desktop_app.engine.session import ResumeRun, RunRequest
from desktop_app.engine.sweep import study as studies
from desktop_app.engine.sweep.events import COMPLETE, FAILED, INTERRUPTED, PRUNED, TrialFinished, TrialReport
from desktop_app.engine.sweep.goal import Goal
from desktop_app.engine.sweep.space import Dimension, apply
from desktop_app.engine.sweep.spec import SweepSpec
from desktop_app.engine.sweep_folder import BEST_FILE, trial_dir, write_json, write_trial

DONE = ("completed", "early_stopped")
MAX_FAILURES = 3  # trials failing in a row before any completes: the sweep stops (the base config cannot train)


@dataclass
class SweepRun:
    """A sweep being run by this process: its folder, spec, space, goal and study, and what it has seen."""

    sweep_dir: Path
    spec: SweepSpec
    dims: list[Dimension]
    goal: Goal
    study: Any  # optuna.Study
    group: dict[str, Any] = field(default_factory=dict)  # what each trial's note tells its trackers
    threads: int = 0  # CPU threads of each trial when several run at once (0: as the run config says)
    orphans: list[Any] = field(default_factory=list)  # trials left RUNNING by a process that is gone
    failures: int = 0  # trials failed in a row
    distributions: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrialPlan:
    """A trial about to run: its run (a new one, or its own continued), or its verdict when its run already ended."""

    trial: Any  # optuna.Trial
    run_dir: Path
    resumed: bool
    what: RunRequest | ResumeRun | None = None
    done: TrialFinished | None = None

    @property
    def number(self) -> int:
        return int(self.trial.number)


def take_next(run: SweepRun, active: int = 0) -> tuple[Any, bool] | None:
    """The next trial to run and whether it continues an interrupted one; None when the sweep has all it needs
    (`active`: trials this process is running now)."""
    if run.orphans:
        return studies.take_over(run.study, run.orphans.pop(0)), True
    if studies.judged(run.study) + active >= run.spec.trials:
        return None
    if run.failures >= MAX_FAILURES and not studies.trials_in(run.study, "COMPLETE", "PRUNED"):
        return None  # nothing trains: more trials would fail the same way
    return run.study.ask(run.distributions), False


def plan_trial(run: SweepRun, trial: Any, resumed: bool) -> TrialPlan:
    """Its run folder (with the note that groups it under the sweep) and how it runs."""
    number, params = int(trial.number), dict(trial.params)
    folder = trial_dir(run.sweep_dir, number)
    write_trial(folder, {**run.group, "trial": number, "params": params})
    trial.set_user_attr("run_dir", str(folder.relative_to(run.sweep_dir)))
    plan = TrialPlan(trial, folder, resumed)
    if resumed:
        summary = run_folder.MetricsSummary.of(run_folder.read_metrics(folder))
        ended = (summary.finished or {}).get("reason") in DONE
        if "pruned_at" in trial.user_attrs or ended:  # its verdict was decided before the process went
            plan.done = conclude(run, plan, None)
            return plan
        if (folder / run_folder.RUN_FILE).is_file():
            plan.what = ResumeRun(folder)
            return plan
    config = apply(run.spec.base, params)
    if run.threads:
        config["train"] = {**config.get("train", {}), "threads": run.threads}
    plan.what = RunRequest(config=config)
    return plan


class TrialWatch:
    """A trial's evaluations as they come: each figure reported to the study, and the pruner asked after it."""

    def __init__(self, run: SweepRun, plan: TrialPlan):
        self.run, self.trial = run, plan.trial
        frozen = run.study.get_trials(deepcopy=False)
        known = next((t for t in frozen if t.number == plan.number), None)
        self.reported = set(known.intermediate_values) if known is not None else set()
        self.best: float | None = None
        self.pruned_at: int | None = None

    def take(self, event: Event) -> TrialReport | None:
        if event.type != "eval" or self.pruned_at is not None:
            return None
        goal, step = self.run.goal, int(event.step)  # type: ignore[attr-defined]
        value = goal.reported(event.metrics.get(goal.metric))  # type: ignore[attr-defined]
        if value is None:
            return None
        if step not in self.reported:  # a continued trial evaluates again where it was killed: reported once
            self.trial.report(value, step)
            self.reported.add(step)
        if math.isfinite(value) and (self.best is None or goal.better(value, self.best)):
            self.best = value
        pruned = bool(self.trial.should_prune())
        if pruned:
            self.pruned_at = step
            self.trial.set_user_attr("pruned_at", step)  # decided: a crash before it is told keeps it
        return TrialReport(int(self.trial.number), step, value, self.best if self.best is not None else value, pruned)


def conclude(run: SweepRun, plan: TrialPlan, watch: TrialWatch | None, *, error: str = "",
             stopped: bool = False) -> TrialFinished:
    """Tell the study the trial's verdict from what its run folder recorded (nothing when it was interrupted)."""
    records = run_folder.read_metrics(plan.run_dir)
    summary = run_folder.MetricsSummary.of(records)
    steps = int(summary.last_step.get("step", 0) or 0)
    reason = (summary.finished or {}).get("reason")
    value, goal, trial = run.goal.best(records), run.goal, plan.trial
    pruned_at = watch.pruned_at if watch is not None else trial.user_attrs.get("pruned_at")
    trial.set_user_attr("steps", steps)
    if pruned_at is not None:
        state, message = PRUNED, f"pruned at step {pruned_at}: its {goal.metric} was behind the other trials'"
        studies.tell(run.study, trial, "PRUNED")
    elif not error and stopped and reason not in DONE:
        return TrialFinished(plan.number, INTERRUPTED, value, dict(trial.params), str(plan.run_dir), steps,
                             f"interrupted at step {steps}: it continues when the sweep is resumed")
    elif not error and reason in DONE and value is not None:
        state, message = COMPLETE, f"{goal.metric} {value:.6g} after {steps} steps"
        studies.tell(run.study, trial, "COMPLETE", value)
    else:
        state = FAILED
        message = error or (f"its run reported no {goal.metric}" if reason in DONE else
                            str((summary.finished or {}).get("message") or "its run ended without finishing"))
        trial.set_user_attr("error", message)
        studies.tell(run.study, trial, "FAIL")
    run.failures = run.failures + 1 if state == FAILED else 0
    best = record_best(run)
    return TrialFinished(plan.number, state, value, dict(trial.params), str(plan.run_dir), steps, message,
                         best.get("number") if best else None, best.get("value") if best else None)


def record_best(run: SweepRun) -> dict[str, Any] | None:
    """SWEEP/best.json: the best complete trial, its settings, run folder and best checkpoint (None: none yet)."""
    complete = studies.trials_in(run.study, "COMPLETE")
    if not complete:
        return None
    pick = min if run.goal.direction == "minimize" else max
    best = pick(complete, key=lambda t: t.value)
    folder = trial_dir(run.sweep_dir, best.number)
    finished = run_folder.MetricsSummary.of(run_folder.read_metrics(folder)).finished or {}
    checkpoint = (finished.get("result") or {}).get("best_checkpoint") or str(
        run_folder.latest_checkpoint(folder, verify=False) or "")
    data = {"number": best.number, "value": best.value, "metric": run.goal.metric, "direction": run.goal.direction,
            "params": best.params, "run_dir": str(folder), "run_config": str(folder / run_folder.RUN_FILE),
            "checkpoint": checkpoint}
    write_json(run.sweep_dir / BEST_FILE, data)
    return data


class TrialControls(Controls):
    """A trial's flags: the sweep's pause, save-now and answers to a blocked save, and a stop of its own (a pruned
    trial stops alone) that the sweep's stop sets too."""

    def __init__(self, sweep: Controls):
        super().__init__(answers_faults=sweep.answers_faults)
        self.sweep = sweep
        self.pause, self.save_now, self.retry = sweep.pause, sweep.save_now, sweep.retry
        self.stop = LinkedStop(sweep.stop)

    def save_elsewhere(self, folder: str) -> None:
        self.sweep.save_elsewhere(folder)

    def take_decision(self) -> tuple[bool, str]:
        return self.sweep.take_decision()


class LinkedStop(threading.Event):
    """A stop flag that is also set while `outer` is (the sweep's stop reaches the trial, the trial's stays its own)."""

    def __init__(self, outer: threading.Event):
        super().__init__()
        self.outer = outer

    def is_set(self) -> bool:
        return super().is_set() or self.outer.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = 0.05 if end is None else min(0.05, end - time.monotonic())
            if left <= 0:
                break
            super().wait(left)
        return self.is_set()
