"""What a sweep yields besides its trials' own run events (plain dataclasses, as engine/events.py's).

    SweepStarted    the sweep begins or resumes: where, judged by what, how many trials, how many at once
    TrialStarted    a trial begins (or an interrupted one continues): its number, settings and run folder
    TrialReport     one evaluation of a trial: the figure the pruner got, and whether the trial is pruned there
    TrialFinished   a trial's verdict: complete (with its value), pruned, failed, or interrupted (it continues when
                    the sweep is resumed); and the sweep's best trial so far
The sweep ends with engine/events.Finished, whose result names the best trial, its settings, run and checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from desktop_app.engine.events import Event

# A trial's verdicts (TrialFinished.state)
COMPLETE, PRUNED, FAILED, INTERRUPTED = "complete", "pruned", "failed", "interrupted"


@dataclass
class SweepStarted(Event):
    type: ClassVar[str] = "sweep_start"
    sweep_dir: str
    metric: str
    direction: str
    trials: int  # in all
    done: int = 0  # trials that already had their verdict (a resumed sweep)
    parallel: int = 1  # trials at once
    threads: int = 0  # CPU threads of each trial at once (0: as the run config says)
    resumed: bool = False
    vary: list[str] = field(default_factory=list)


@dataclass
class TrialStarted(Event):
    type: ClassVar[str] = "trial_start"
    number: int
    params: dict[str, Any] = field(default_factory=dict)  # setting path -> value
    run_dir: str = ""
    resumed: bool = False  # an interrupted trial continues (its run from its newest checkpoint)


@dataclass
class TrialReport(Event):
    type: ClassVar[str] = "trial_report"
    number: int
    step: int
    value: float
    best: float  # the trial's best so far
    pruned: bool = False


@dataclass
class TrialFinished(Event):
    type: ClassVar[str] = "trial_end"
    number: int
    state: str  # complete | pruned | failed | interrupted
    value: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    run_dir: str = ""
    steps: int = 0  # the step its run reached
    message: str = ""
    best_number: int | None = None  # the sweep's best trial after this one
    best_value: float | None = None
