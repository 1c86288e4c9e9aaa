"""What the Train tab runs in the background runner's worker thread: generators of the engine's typed events.

No Qt here, and no choice of how a run starts: the tab opens an engine session (engine/session.py, the one door the
CLI and the server use too) and a job here only runs its events; the tab shows what they yield through its run
display.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.events import Controls, Event, Progress
from desktop_app.engine.recipes.selfplay_demo import run_demo
from desktop_app.engine.session import Session


def session_job(session: Session, controls: Controls) -> Iterator[Event]:
    """A run as the engine's session runs it (new, resumed or a pipeline; in this process or under torchrun, as
    the session chose). Interactive: the thread policy leaves a core to the window so the GUI stays responsive. A
    pipeline's stage counts are left out: the display follows its StageStarted events instead."""
    for event in session.events(controls, interactive=True):
        if isinstance(event, Progress) and event.stage == "pipeline":
            continue
        yield event


def demo_job(out: Path, controls: Controls, minutes: float, train_overrides: dict[str, Any] | None = None,
             tasks_from: str = "") -> Iterator[Event]:
    """The self-play CPU demo (seed corpus -> pretraining -> self-play). Each phase is a run of its own whose
    RunFolder event (with its method: pretraining, self-play) starts fresh curves; `train_overrides`: TrainSpec
    fields both of its runs take (e.g. a time_budget_s), passed to the recipe as they are; `tasks_from`: self-play's
    first tasks (the form's choice; "" = the recipe's)."""
    options: dict[str, Any] = {"train_overrides": dict(train_overrides)} if train_overrides else {}
    if tasks_from:
        options["tasks_from"] = tasks_from
    yield from run_demo(out, minutes=minutes, controls=controls, **options)
