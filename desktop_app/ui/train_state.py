"""What the Train tab runs, shows and can resume, kept without Qt (napari's model/view split).

The tab renders this state and changes it only through these methods; the engine's events come in through
`record`. No widget, signal or thread here: a test drives it with plain events.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from desktop_app.engine.events import Event, RunFolder, StageStarted, StepMetrics
from desktop_app.engine.methods import PIPELINE, Method
from desktop_app.engine.pipeline_folder import is_pipeline_dir, read_state
from desktop_app.engine.specs import RunConfig

RUN, PIPELINE_JOB, DEMO = "run", "pipeline", "demo"  # the jobs the tab starts
StageState = tuple[str, str]  # (waiting | running | done, detail) as the pipeline editor shows it


@dataclass
class TrainState:
    """The job that runs (or ran last), the run folder shown, and where a pipeline is."""

    job: str = ""  # RUN, PIPELINE_JOB or DEMO while one runs; "" otherwise
    config: RunConfig | None = None  # the running run's config (None for a pipeline or the demo)
    run_dir: Path | None = None  # the run running or shown (a pipeline's current stage): what Resume continues
    pipeline_dir: Path | None = None  # the pipeline folder of the current / last pipeline
    stages: int = 0  # how many stages the running pipeline has
    stage_index: int = -1  # the stage it is at
    steps_seen: int = 0  # steps of the running job shown so far
    watched_dir: Path | None = None  # the run followed from outside the window (CLI, torchrun)

    @property
    def pipeline_running(self) -> bool:
        return self.job == PIPELINE_JOB

    def begin(self, job: str, run_dir: Path, config: RunConfig | None = None, stages: int = 0) -> None:
        """A job starts: a run (with its config), a pipeline (its folder, `stages` of them) or the demo."""
        self.job, self.config, self.run_dir, self.stages, self.steps_seen = job, config, run_dir, stages, 0
        if job == PIPELINE_JOB:
            self.pipeline_dir, self.stage_index = run_dir, -1

    def record(self, event: Event) -> None:
        """Keep what the tab needs of an event: steps seen, the run folder (what a window closed mid-run remembers,
        to resume) and the pipeline's stage."""
        if isinstance(event, StepMetrics):
            self.steps_seen += 1
        elif isinstance(event, RunFolder):
            self.run_dir = Path(event.path)
        elif isinstance(event, StageStarted):
            # resuming a stage folder resumes its pipeline, so the next launch's offer continues the pipeline
            self.stage_index, self.run_dir = event.index, Path(event.run_dir)

    def end(self) -> None:
        """The job is over (completed, stopped or failed); the folders stay, to show and resume."""
        self.job, self.stages = "", 0

    def show(self, run_dir: Path) -> None:
        """A run shown again (its history) or watched: the folder the display belongs to."""
        self.run_dir = run_dir

    def watch(self, run_dir: Path) -> None:
        self.run_dir = self.watched_dir = run_dir

    def open_pipeline(self, root: Path) -> None:
        """A pipeline folder shown in the editor (to resume it or show its stages)."""
        self.pipeline_dir = root

    def stage_states(self, before: list[StageState], count: int) -> list[StageState]:
        """The pipeline editor's stage states once the current stage started: the earlier ones done (keeping their
        detail), it running, the later ones waiting."""
        before = before or [("waiting", "")] * count
        return [(before[j] if before[j][0] == "done" else ("done", "")) if j < self.stage_index else
                ("running", "") if j == self.stage_index else ("waiting", "") for j in range(count)]

    def stage_progress(self, step: int, total_steps: int) -> str:
        return f"step {step:,}/{total_steps:,}"


@dataclass(frozen=True)
class JobStart:
    """How a job starts on the tab: what it is and the words the display shows while the engine loads."""

    job: str  # RUN, PIPELINE_JOB or DEMO
    run_dir: Path
    log_line: str
    progress: str
    status: str
    config: RunConfig | None = None
    activity: str = ""
    stages: int = 0


def start_hint(method: Method) -> str:
    """What the display says before a run of `method` starts."""
    if method.key == "pretraining":
        return "Press Start: with no dataset chosen, the bundled sample corpus is prepared first."
    if method is PIPELINE:
        return ("Pipeline: add stages (or load a pipeline JSON) on the left; each stage starts from the previous "
                "one's output. Press Start: the stages run one after the other, each with its own run folder.")
    return (f"{method.label}: choose the base model{' and the data files' if method.data else ''} on the left, then "
            "press Start. The run folder appears here; curves fill in as the engine reports.")


def folder_to_watch(run_dir: Path) -> tuple[Path, str]:
    """The run folder to follow for `run_dir`, and a note: a pipeline writes its metrics per stage, so its current
    stage is followed. ValueError (in words) when no stage has started."""

    if not is_pipeline_dir(run_dir):
        return run_dir, ""
    state = read_state(run_dir)
    stages, current = state.get("stages") or [], state.get("current", 0)
    if not (isinstance(current, int) and 0 <= current < len(stages) and stages[current].get("run_dir")):
        raise ValueError(f"No stage of the pipeline {run_dir.name} has started yet.")
    note = (f"{run_dir.name} is a pipeline: watching its stage {current + 1} '{stages[current].get('name')}' (the "
            "watch ends with that stage)")
    return Path(stages[current]["run_dir"]), note
