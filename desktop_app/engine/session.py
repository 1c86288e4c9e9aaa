"""The one door to a run: every front end (window, CLI, server) opens a session here for what the person asked for, a
new run (`RunRequest`), a run to continue (`ResumeRun`) or a pipeline (`PipelineRun`), shows what the session found,
and runs its events. Nothing else decides how a run starts.

`open_session` plans the run, checks its files, fits a new model to its dataset and runs preflight exactly once; the
`Session` it returns holds that (`prepared`: the config, one note per adaptation, the findings) for the front end to
show, and `Session.events` runs it: in this process, or under torchrun when the config asks for several processes
and this process is not already one of torchrun's (engine/train/launcher.py). A new run whose dataset is the bundled
sample corpus (the window's first launch) is planned as asked and fitted once the corpus is prepared.

No torch at import: the window opens sessions before the engine is loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Log
from desktop_app.engine.pipeline_folder import is_pipeline_dir
from desktop_app.engine.specs import RunConfig, SpecError
from desktop_app.engine.train.launcher import (
    LaunchControls,
    ProcessFailed,
    launch_config,
    launched_processes,
    launched_torchrun,
    processes_of,
    resume_launch,
    resume_processes,
    stop_launched,
)
from desktop_app.engine.train.memory_plan import Machine, this_machine
from desktop_app.engine.train.preflight import ERROR, Finding, preflight
from desktop_app.engine.train.request import (
    PreparedRun,
    RunRequest,
    check_files,
    fit_to_dataset,
    plan_run,
    prepare_run,
    prepare_sample,
)

# What front ends use of runs on several processes (to show and control them), from here, the one door:
__all__ = ["LaunchControls", "PipelineRun", "ProcessFailed", "ResumeRun", "RunRequest", "Session", "launched_processes",
           "launched_torchrun", "open_session", "start", "stop_launched"]


@dataclass(frozen=True)
class ResumeRun:
    """Continue the run (or pipeline) in `run_dir` from its newest committed checkpoint. `accept_change`: go on
    although run.json or its data files changed since; `processes`: how many (None: as many as it was launched on)."""

    run_dir: str | Path
    accept_change: bool = False
    processes: int | None = None


@dataclass(frozen=True)
class PipelineRun:
    """A multi-stage pipeline (a pipeline.json path or dict) to run into the session's folder."""

    source: str | Path | dict[str, Any]


What = RunRequest | ResumeRun | PipelineRun


@dataclass
class Session:
    """A run opened once: where it goes, what was prepared and found (new runs), how many processes it runs on."""

    what: What
    run_dir: Path | None  # None until `at` names it (a front end that names the folder after the run it holds)
    prepared: PreparedRun | None = None
    processes: int = 1
    config: RunConfig | None = None  # a resumed run's run.json
    notes: list[str] = field(default_factory=list)  # one line per thing the engine adapted (shown as "model: ...")

    @property
    def findings(self) -> list[Finding]:
        return self.prepared.findings if self.prepared is not None else []

    def errors(self) -> list[str]:
        """What preflight says cannot work on this machine (a front end refuses or asks before it starts)."""
        return [f.message for f in self.findings if f.level == ERROR]

    def at(self, run_dir: str | Path) -> Session:
        """The same session into `run_dir` (a new run or pipeline whose folder is named after what it trains)."""
        return dataclasses.replace(self, run_dir=Path(run_dir))

    def events(self, controls: Controls, *, interactive: bool = False) -> Iterator[Event]:
        """Run it: the run's events, in this process or followed under torchrun (the notes and findings are the
        front end's to show, as `start` does)."""
        if self.run_dir is None:
            raise UserError("a new run needs an output folder: the folder that will hold run.json, metrics and "
                            "checkpoints")
        if isinstance(self.what, PipelineRun) or (isinstance(self.what, ResumeRun) and is_pipeline_dir(self.run_dir)):
            yield from _pipeline_events(self, controls, interactive)
        elif isinstance(self.what, ResumeRun):
            yield from _resume_events(self, controls, interactive)
        else:
            yield from _new_run_events(self, controls, interactive)


def open_session(what: What, run_dir: str | Path | None = None, *, machine: Machine | None = None,
                 records: int | None = None) -> Session:
    """A session for `what` into `run_dir` (a resume: the run's own folder), planned, checked and preflighted once
    (on `machine`, this one by default; `records`: the fine-tuning data's record count where the front end has it).
    UserError (SpecError for settings that do not go together) for what cannot be started at all."""
    if isinstance(what, ResumeRun):
        return _open_resume(what, run_dir)
    folder = Path(run_dir) if run_dir is not None else None
    if isinstance(what, PipelineRun):
        return Session(what, folder)
    return _open_new(what, folder, machine, records)


def start(what: What, run_dir: str | Path | None, controls: Controls, *, interactive: bool = False,
          force: bool = False) -> Iterator[Event]:
    """Open a session and run it, the findings first as log lines; a run preflight says cannot work here is refused
    with the reasons (UserError) unless `force`."""
    session = open_session(what, run_dir)
    errors = session.errors()
    if errors and not force:
        raise UserError("this run cannot work on this machine: " + " ".join(errors) + " (--force starts it anyway)")
    for note in session.notes:
        yield Log("info", f"model: {note}")
    for finding in session.findings:
        yield Log(finding.level, f"check before start: {finding.message}")
    yield from session.events(controls, interactive=interactive)


def under_torchrun() -> bool:
    """This process is one of torchrun's: the run trains here, on its share (never launched again)."""
    from desktop_app.engine.train.distributed import launched_world_size  # lazy: torch

    return launched_world_size() > 1


def machine_for(request: RunRequest) -> Machine:
    """This machine as preflight sees it for the run: its GPU looked at only where the run may train on one, and
    never under torchrun (each process picks its own GPU later; looking now would open a CUDA context on the
    first)."""
    train = {**((request.config or {}).get("train") or {}), **request.train}
    device = str(train.get("device") or "auto")
    return this_machine(probe_gpu=None if under_torchrun() else device in ("auto", "cuda"))


# --- opening ---------------------------------------------------------------------------------------------------


def _open_new(request: RunRequest, run_dir: Path | None, machine: Machine | None, records: int | None) -> Session:
    if request.sample is not None:  # the dataset is made when the run starts: planned as asked until then
        config = plan_run(dataclasses.replace(request, dataset=request.dataset or request.sample.dataset_dir))
        problems = config.validate()
        if problems:
            raise SpecError(problems)
        findings = preflight(config, machine or machine_for(request))
        prepared = PreparedRun(config, [], findings)
        return Session(request, run_dir, prepared, processes_of(config))
    prepared = prepare_run(request, machine or machine_for(request), records=records)
    return Session(request, run_dir, prepared, processes_of(prepared.config), notes=list(prepared.notes))


def _open_resume(what: ResumeRun, run_dir: str | Path | None) -> Session:
    folder = Path(what.run_dir)
    if run_dir is not None and Path(run_dir).resolve() != folder.resolve():
        raise UserError("a run resumes in its own folder: give no other output folder")
    if is_pipeline_dir(folder):
        return Session(what, folder)
    if not (folder / run_folder.RUN_FILE).is_file():
        raise UserError(f"{folder} is not a training run (no run.json): nothing to resume")
    config = RunConfig.load(folder / run_folder.RUN_FILE)
    processes = what.processes if what.processes is not None else resume_processes(folder, config)
    return Session(what, folder, None, max(1, int(processes)), config)


# --- running ---------------------------------------------------------------------------------------------------


def _new_run_events(session: Session, controls: Controls, interactive: bool) -> Iterator[Event]:
    request, run_dir = session.what, session.run_dir
    assert isinstance(request, RunRequest) and session.prepared is not None
    config = session.prepared.config
    if request.sample is not None:
        dataset = yield from prepare_sample(request.sample, controls)
        if dataset is None:
            return
        config = plan_run(dataclasses.replace(request, dataset=dataset, sample=None))
        check_files(config)
        config, notes = fit_to_dataset(config)
        for note in notes:
            yield Log("info", f"model: {note}")
        config = config.check()
    if session.processes > 1 and not under_torchrun():

        yield from launch_config(config, run_dir, controls)
        return
    from desktop_app.engine.train.loop import train  # lazy: torch

    yield from train(config, run_dir, controls, interactive=interactive)  # it makes the folder, or says why not


def _resume_events(session: Session, controls: Controls, interactive: bool) -> Iterator[Event]:
    what = session.what
    assert isinstance(what, ResumeRun) and session.config is not None
    if session.processes > 1 and not under_torchrun():

        yield from resume_launch(session.run_dir, controls, nproc=session.processes)
        return
    from desktop_app.engine.train.loop import train  # lazy: torch

    yield from train(session.config, session.run_dir, controls, resume=True, accept_config_change=what.accept_change,
                     interactive=interactive)


def _pipeline_events(session: Session, controls: Controls, interactive: bool) -> Iterator[Event]:
    from desktop_app.engine.recipes.pipeline import run_pipeline  # lazy: torch

    if under_torchrun():
        raise UserError("a pipeline runs in one process; under torchrun, run each stage's run.json with train --config")
    what = session.what
    if isinstance(what, ResumeRun):
        yield from run_pipeline(None, session.run_dir, controls, resume=True, interactive=interactive)
    else:
        assert isinstance(what, PipelineRun)
        yield from run_pipeline(what.source, session.run_dir, controls, interactive=interactive)
