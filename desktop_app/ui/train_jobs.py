"""What the Train tab runs in the background runner's worker thread: generators of the engine's typed events.

No Qt here. Each job only runs engine generators (the engine prepares every run, as it does for the CLI and the
server); the tab shows what they yield through its run display.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.events import Controls, Event, Progress
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train.request import RunRequest, start_run


def train_job(request: RunRequest, run_dir: Path, controls: Controls) -> Iterator[Event]:
    """A new run as the engine starts it for every front end (engine/train/request.start_run: the sample corpus
    prepared first when the request has one, the model fitted to its dataset, then train())."""
    # interactive: the thread policy leaves a core to the window so the GUI stays responsive.
    yield from start_run(request, run_dir, controls, interactive=True)


def resume_job(config: RunConfig, run_dir: Path, controls: Controls, accept_change: bool = False) -> Iterator[Event]:
    """A run continued from its newest committed checkpoint, with the config in its run.json (`accept_change`: the
    person chose to continue on data files changed since the run started)."""
    from desktop_app.engine.train.loop import train

    yield from train(config, run_dir, controls, resume=True, accept_config_change=accept_change, interactive=True)


def demo_job(out: Path, controls: Controls, minutes: float,
             train_overrides: dict[str, Any] | None = None) -> Iterator[Event]:
    """The self-play CPU demo (seed corpus -> pretraining -> self-play). Each phase is a run of its own whose
    RunFolder event (with its method: pretraining, self-play) starts fresh curves; `train_overrides`: TrainSpec
    fields both of its runs take (e.g. a time_budget_s), passed to the recipe as they are."""
    from desktop_app.engine.recipes.selfplay_demo import run_demo

    options = {"train_overrides": dict(train_overrides)} if train_overrides else {}
    yield from run_demo(out, minutes=minutes, controls=controls, **options)


def pipeline_job(source: dict[str, Any] | None, out: Path, controls: Controls, resume: bool) -> Iterator[Event]:
    """A pipeline (source None: resume the one in `out`): each stage's StageStarted, then its run's events."""
    from desktop_app.engine.recipes.pipeline import run_pipeline

    for event in run_pipeline(source, out, controls, resume=resume, interactive=True):
        if isinstance(event, Progress) and event.stage == "pipeline":
            continue  # stages done / all: the display follows StageStarted instead
        yield event


def launch_job(request: RunRequest, run_dir: Path, controls: Controls) -> Iterator[Event]:
    """A new run on the processes its Distributed block names: the engine plans it (the one run entry), writes
    run.json, starts torchrun and follows rank 0's metrics (engine/train/launcher.py)."""
    from desktop_app.engine.train.launcher import launch_run

    yield from launch_run(request, run_dir, controls)


def resume_launch_job(run_dir: Path, controls: Controls, nproc: int) -> Iterator[Event]:
    """A run continued on `nproc` processes (torchrun `train --resume`), followed as launch_job follows it."""
    from desktop_app.engine.train.launcher import resume_launch

    yield from resume_launch(run_dir, controls, nproc=nproc)
