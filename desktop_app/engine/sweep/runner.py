"""A hyperparameter sweep, opened once and run as a generator of events, as every front end runs it (the window, the
CLI's `sweep`, the server's POST /api/sweeps):

    sweep = open_sweep(NewSweep(request, spec), sweep_dir)     # or open_sweep(ResumeSweep(sweep_dir))
    sweep.notes, sweep.findings, sweep.errors()                 # what was planned and found, to show first
    for event in sweep.events(controls): ...                    # SweepStarted, then per trial TrialStarted,
                                                                # [its run's events], TrialReport..., TrialFinished;
                                                                # Finished last (result: the best trial)

A new sweep plans its base run once (engine/session.py: planned, fitted, checked, preflighted), checks what varies
against that run's method (space.py) and its metric (goal.py), and writes nothing until `events` runs. Trials run
here, one after another, each through the one run entry with its events passed on between its TrialStarted and its
TrialFinished (its own Finished kept back; a window shows the trial live as any run); or, when several fit at once,
in child processes (parallel.py), whose runs' events stay in their folders (the sweep yields their reports).

Controls: stop ends the sweep after the running trials save (they stay unfinished in the study, and `ResumeSweep`
continues them); pause and save-now reach the running trials. A sweep killed outright resumes the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Finished, Log
from desktop_app.engine.session import RunRequest, open_session
from desktop_app.engine.specs import RunConfig, SpecError, load_json
from desktop_app.engine.sweep import study as studies
from desktop_app.engine.sweep.events import SweepStarted, TrialFinished, TrialStarted
from desktop_app.engine.sweep.goal import Goal, goal_of
from desktop_app.engine.sweep.parallel import Slots, plan_slots, run_children
from desktop_app.engine.sweep.space import Dimension, parse_space, suggested
from desktop_app.engine.sweep.spec import SweepSpec
from desktop_app.engine.sweep.trials import (
    SweepRun,
    TrialControls,
    TrialPlan,
    TrialWatch,
    conclude,
    plan_trial,
    record_best,
    take_next,
)
from desktop_app.engine.sweep_folder import STUDY_FILE, SWEEP_FILE, is_sweep_dir, read_best, write_json
from desktop_app.engine.train.preflight import ERROR, Finding
from desktop_app.engine.train.tracking import end_sweep_group, sweep_group


@dataclass(frozen=True)
class NewSweep:
    """A new sweep of the run `request` describes (a whole run.json, or the window's fields), as `spec` says (its
    `base` is filled from the planned run)."""

    request: RunRequest
    spec: SweepSpec


@dataclass(frozen=True)
class ResumeSweep:
    """Continue the sweep in `sweep_dir` (`trials`: more in all than it was started with)."""

    sweep_dir: str | Path
    trials: int | None = None


@dataclass
class Sweep:
    """A sweep opened once: its folder, spec, space and goal, and what planning its base run adapted and found."""

    sweep_dir: Path
    spec: SweepSpec
    dims: list[Dimension]
    goal: Goal
    resumed: bool = False
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def errors(self) -> list[str]:
        """What the base run's preflight says cannot work on this machine (a front end refuses, or asks)."""
        return [f.message for f in self.findings if f.level == ERROR]

    def events(self, controls: Controls, *, interactive: bool = False) -> Iterator[Event]:
        """Run (or resume) the sweep until it has its trials, or is stopped."""
        with studies.sweep_lock(self._folder()):
            run = self._start()
            slots = plan_slots(self.spec.parallel, RunConfig.from_dict(self.spec.base), self.dims) \
                if self.spec.parallel != 1 else Slots(1)
            run.threads = slots.threads if slots.n > 1 else 0
            yield SweepStarted(str(self.sweep_dir), self.goal.metric, self.goal.direction, self.spec.trials,
                               studies.judged(run.study), slots.n, run.threads, self.resumed,
                               [d.text() for d in self.dims])
            if slots.reason:
                yield Log("info", slots.reason)
            if slots.n > 1:
                yield from run_children(run, controls, slots)
            else:
                yield from _run_here(run, controls, interactive)
            yield _finished(run, controls)
            end_sweep_group(run.sweep_dir, run.group, "stopped" if controls.stop.is_set() else "completed",
                            read_best(run.sweep_dir))

    def _folder(self) -> Path:
        if not self.resumed:
            try:
                self.sweep_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UserError(f"cannot make the sweep folder {self.sweep_dir}: {exc.strerror or exc}") from None
        return self.sweep_dir

    def _start(self) -> SweepRun:
        write_json(self.sweep_dir / SWEEP_FILE, self.spec.to_dict())  # a resume may have asked for more trials
        study = studies.open_study(self.sweep_dir, self.spec, self.dims, self.goal.direction)
        name = self.spec.name or self.sweep_dir.name
        base = RunConfig.from_dict(self.spec.base)
        settings = {k: v for k, v in self.spec.to_dict().items() if k != "base"}
        group = sweep_group(self.sweep_dir, name, base.train_spec().trackers, self.goal.metric, settings)
        run = SweepRun(self.sweep_dir, self.spec, self.dims, self.goal, study, group,
                       orphans=studies.trials_in(study, "RUNNING"),
                       distributions=studies.distributions(self.dims, self.spec.sampler == "grid"))
        return run


def open_sweep(what: NewSweep | ResumeSweep, sweep_dir: str | Path | None = None) -> Sweep:
    """A sweep planned and checked once; UserError (one line) for what cannot run: no Optuna, a setting the method
    lacks, an empty range, a metric it never reports, a folder holding something else."""
    studies.load_optuna()
    if isinstance(what, ResumeSweep):
        return _open_resume(what)
    if sweep_dir is None:
        raise UserError("a new sweep needs an output folder: the folder that will hold its study and trials")
    folder = Path(sweep_dir)
    if is_sweep_dir(folder):
        raise UserError(f"{folder} already holds a sweep: resume it (sweep --resume {folder}) or choose a new folder")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UserError(f"{folder} is not an empty folder: choose a new folder for the sweep")
    if what.request.sample is not None:
        raise UserError("a sweep trains on a prepared dataset: prepare the sample corpus (or your files) first")
    session = open_session(what.request)
    assert session.prepared is not None
    if session.processes > 1:
        raise UserError("a sweep's trials train on one process each: remove the run config's distributed block")
    config = session.prepared.config
    unmeasured = [f.message for f in session.findings if f.message.startswith("No validation curve")]
    if unmeasured and what.spec.metric.startswith("val_"):
        raise UserError(f"no trial could report {what.spec.metric}: {unmeasured[0]}")
    spec = dataclasses.replace(what.spec, base=config.to_dict(), vary=list(what.spec.vary) or suggested(config))
    sweep = _checked(folder, spec, resumed=False)
    sweep.notes[:0] = [f"model: {n}" for n in session.notes]
    if not what.spec.vary:
        sweep.notes.append("nothing asked to vary: the method's usual settings vary (" + "; ".join(spec.vary) + ")")
    sweep.findings = session.findings
    return sweep


def _open_resume(what: ResumeSweep) -> Sweep:
    folder = Path(what.sweep_dir)
    if not is_sweep_dir(folder):
        raise UserError(f"{folder} is not a sweep folder (no {SWEEP_FILE}): nothing to resume")
    if not (folder / STUDY_FILE).is_file():
        raise UserError(f"the sweep's database {folder / STUDY_FILE} is missing, and with it the sweep's history: "
                        "start a new sweep")
    try:
        spec = SweepSpec.from_dict(load_json(folder / SWEEP_FILE))
    except SpecError as exc:
        raise UserError(f"{folder / SWEEP_FILE} is damaged: {exc}") from None
    if what.trials is not None:
        spec = dataclasses.replace(spec, trials=what.trials)
    return _checked(folder, spec, resumed=True)


def _checked(folder: Path, spec: SweepSpec, *, resumed: bool) -> Sweep:
    spec.check()
    config = RunConfig.from_dict(spec.base)
    dims = parse_space(list(spec.vary), config)
    goal = goal_of(config, spec.metric, spec.direction)
    notes = []
    if spec.sampler == "grid" and spec.trials > studies.grid_size(dims):
        notes.append(f"the grid holds {studies.grid_size(dims)} combinations: as many trials")
        spec = dataclasses.replace(spec, trials=studies.grid_size(dims))
    return Sweep(folder, spec, dims, goal, resumed, notes)


# --- trials here, one after another -------------------------------------------------------------------------------

def _run_here(run: SweepRun, controls: Controls, interactive: bool) -> Iterator[Event]:
    while not controls.stop.is_set():
        nxt = take_next(run)
        if nxt is None:
            return
        plan = plan_trial(run, *nxt)
        yield TrialStarted(plan.number, dict(plan.trial.params), str(plan.run_dir), plan.resumed)
        if plan.done is not None:
            yield plan.done
            continue
        yield from _trial_here(run, plan, controls, interactive)


def _trial_here(run: SweepRun, plan: TrialPlan, controls: Controls, interactive: bool) -> Iterator[Event]:
    """One trial's run in this process: its events (its Finished kept back), its reports, then its verdict."""
    trial_controls = TrialControls(controls)
    watch, error = TrialWatch(run, plan), ""
    try:
        assert plan.what is not None
        session = open_session(plan.what, plan.run_dir)
        refused = session.errors()
        if refused:
            raise UserError("this trial cannot work on this machine: " + " ".join(refused))
        varied = {d.path.rpartition(".")[2] for d in run.dims}
        for finding in session.findings:  # not the warnings on a setting the sweep varies on purpose
            if finding.field not in varied:
                yield Log(finding.level, f"check before start: {finding.message}")
        for event in session.events(trial_controls, interactive=interactive):
            if isinstance(event, Finished):
                continue
            yield event
            report = watch.take(event)
            if report is not None:
                yield report
                if report.pruned:
                    trial_controls.stop.set()
    except UserError as exc:
        error = str(exc)
    yield conclude(run, plan, watch, error=error, stopped=controls.stop.is_set())


def _finished(run: SweepRun, controls: Controls) -> Finished:
    """The sweep's last event: how it ended, its trials by verdict, the steps they trained and the best trial."""
    best = record_best(run)
    by_state = {s: len(studies.trials_in(run.study, s)) for s in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")}
    steps = sum(int(t.user_attrs.get("steps", 0)) for t in run.study.get_trials(deepcopy=False))
    result: dict[str, Any] = {"sweep_dir": str(run.sweep_dir), "metric": run.goal.metric,
                              "direction": run.goal.direction, "complete": by_state["COMPLETE"],
                              "pruned": by_state["PRUNED"], "failed": by_state["FAIL"],
                              "unfinished": by_state["RUNNING"], "steps": steps, "best": best}
    judged = by_state["COMPLETE"] + by_state["PRUNED"] + by_state["FAIL"]
    if best is not None:
        shown = ", ".join(f"{k.rpartition('.')[2]}={v:.4g}" if isinstance(v, float) else f"{k.rpartition('.')[2]}={v}"
                          for k, v in best["params"].items())
        summary = f"best trial {best['number']}: {run.goal.metric} {best['value']:.6g} with {shown} ({best['run_dir']})"
    else:
        summary = "no trial completed"
    if controls.stop.is_set():
        return Finished("stopped", judged, f"sweep stopped after {judged} of {run.spec.trials} trials; {summary}; "
                        f"resume with: sweep --resume {run.sweep_dir}", result)
    if best is None and by_state["FAIL"]:
        last = next((t.user_attrs.get("error") for t in reversed(studies.trials_in(run.study, "FAIL"))), "")
        return Finished("failed", judged, f"{by_state['FAIL']} trial(s) failed, none completed: {last}", result)
    return Finished("completed", judged, f"{judged} trials ({by_state['PRUNED']} pruned, {by_state['FAIL']} failed), "
                    f"{steps} steps in all; {summary}", result)


def sweep_status(sweep_dir: str | Path) -> dict[str, Any]:
    """Where a sweep stands from its folder (for a list, or a sweep this process is not running): its spec, its trials
    by state and its best trial so far."""
    folder = Path(sweep_dir)
    if not is_sweep_dir(folder):
        raise UserError(f"{folder} is not a sweep folder (no {SWEEP_FILE})")
    spec = load_json(folder / SWEEP_FILE)
    trials: list[dict[str, Any]] = []
    if (folder / STUDY_FILE).is_file():
        optuna = studies.load_optuna()
        try:
            study = optuna.load_study(study_name=studies.STUDY_NAME, storage=studies.storage_url(folder / STUDY_FILE))
        except Exception as exc:
            problem = studies.database_problem(exc, folder / STUDY_FILE)
            if problem is None:
                raise
            raise UserError(problem) from None
        trials = [{"number": t.number, "state": t.state.name.lower(), "value": t.value, "params": t.params,
                   "steps": t.user_attrs.get("steps", 0)} for t in study.get_trials(deepcopy=False)]
    return {"path": str(folder), "trials": spec.get("trials"), "metric": spec.get("metric"), "vary": spec.get("vary"),
            "states": {s: sum(t["state"] == s for t in trials) for s in ("complete", "pruned", "fail", "running")},
            "best": read_best(folder), "history": trials}


__all__ = ["NewSweep", "ResumeSweep", "Sweep", "TrialFinished", "open_sweep", "sweep_status"]
