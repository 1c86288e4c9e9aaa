"""What long work reports: plain dataclasses of floats, ints and strings (never tensors).

Engine generators yield these; the CLI prints them, the UI re-emits them as Qt signals. Every event
has a `type` string and `to_dict()` so `--json` output and metrics.jsonl share one shape.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class Event:
    type: ClassVar[str] = "event"
    # Written to a run's metrics.jsonl as it happens; False for what only describes the work in progress
    # (Transient: progress bars, where the run lives, history replayed from disk).
    recorded: ClassVar[bool] = True

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **dataclasses.asdict(self)}


@dataclass
class Transient(Event):
    """An event that only describes the work in progress: never written to metrics.jsonl (recorded False)."""

    recorded: ClassVar[bool] = False


@dataclass
class Progress(Transient):
    """Generic progress of a stage of long work (ingest, tokenizer training, encoding, saving...)."""

    type: ClassVar[str] = "progress"
    stage: str
    done: float
    total: float  # 0 when unknown
    unit: str = ""
    message: str = ""


@dataclass
class Log(Event):
    type: ClassVar[str] = "log"
    level: str  # "info" | "warning" | "error"
    message: str


@dataclass
class FileVerdict(Event):
    """One input file judged: verdict "ok" or the problem (e.g. "binary"), with a reason a person reads."""

    type: ClassVar[str] = "file"
    path: str
    verdict: str
    reason: str = ""
    format: str = ""  # text | jsonl-text | chat | instruction | preference
    encoding: str = ""
    size: int = 0
    documents: int = 0
    tokens: int = 0


@dataclass
class Started(Event):
    """The first event of a training run: how many processes train it (torchrun) and where."""

    type: ClassVar[str] = "start"
    world_size: int = 1
    strategy: str = "single"  # single | ddp | fsdp
    device: str = "cpu"
    start_step: int = 0  # the checkpoint's step when resuming


@dataclass
class StepMetrics(Event):
    """Training metrics of one logged step. `metrics` holds any named scalar (loss, lr, reward...)."""

    type: ClassVar[str] = "step"
    step: int
    total_steps: int
    metrics: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0
    eta_s: float = 0.0  # 0 while the run's pace is not known yet (its first few steps)

    @property
    def progress(self) -> float:
        return self.step / self.total_steps if self.total_steps else 0.0

    def to_dict(self) -> dict[str, Any]:
        # Flat shape for --json and metrics.jsonl: {"type": "step", "step": 3, "loss": 2.1, ...}
        return {"type": self.type, "step": self.step, "total_steps": self.total_steps,
                "elapsed_s": self.elapsed_s, "eta_s": self.eta_s, **self.metrics}


@dataclass
class EvalResult(Event):
    type: ClassVar[str] = "eval"
    step: int
    metrics: dict[str, float] = field(default_factory=dict)  # val_loss, val_ppl, val_bpb, ...

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "step": self.step, **self.metrics}


@dataclass
class Sample(Event):
    type: ClassVar[str] = "sample"
    step: int
    prompt: str
    text: str


@dataclass
class CheckpointSaved(Event):
    type: ClassVar[str] = "checkpoint"
    step: int
    path: str
    best: bool = False


@dataclass
class SaveBlocked(Transient):
    """The run could not write its checkpoint (a full disk, a read-only folder...) and waits for the person: retry,
    save elsewhere or stop (Controls). `message` is the one line saying why and what to do; `needed` and `free` are
    bytes (0 / -1 when unknown). Not recorded: the disk that refused the checkpoint would refuse the record too."""

    type: ClassVar[str] = "save_blocked"
    step: int
    message: str
    folder: str
    needed: int = 0
    free: int = -1


@dataclass
class Finished(Event):
    """The last event of any long work. reason: completed | stopped | early_stopped | failed | cancelled."""

    type: ClassVar[str] = "finished"
    reason: str
    step: int = 0
    message: str = ""
    result: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunFolder(Transient):
    """The run folder that the events after it belong to: a run starts (or resumes), a pipeline stage or a demo
    phase begins. A view starts a fresh display for it (the curve of a resumed run comes next, as History)."""

    type: ClassVar[str] = "run_folder"
    path: str
    method: str = "pretraining"  # the method's key (methods.py): which plots fit it
    resumed: bool = False


@dataclass
class History(Transient):
    """Records a run wrote before: a resumed run's curve up to its checkpoint, a finished run shown again, or what a
    watched run's metrics.jsonl grew by. `records` are in their metrics.jsonl form; `events()` gives them back as
    the events they were, so they are shown exactly as live ones."""

    type: ClassVar[str] = "history"
    run_dir: str
    records: list[dict[str, Any]] = field(default_factory=list)
    live: bool = False  # a run another process trains right now (watched): its end and its log lines count

    def events(self) -> list[Event]:
        return [e for e in map(event_from_dict, self.records) if e is not None]


@dataclass
class StageStarted(Transient):
    """A pipeline stage begins (its RunFolder follows)."""

    type: ClassVar[str] = "stage"
    index: int
    name: str
    run_dir: str
    method: str = ""


@dataclass
class DatasetReady(Transient):
    """A dataset was prepared on the way (e.g. the sample corpus before a first run)."""

    type: ClassVar[str] = "dataset"
    path: str


@dataclass
class Reset(Transient):
    """A watched metrics.jsonl was cut back (a resume) or replaced (a new run): what follows starts again."""

    type: ClassVar[str] = "reset"


class Controls:
    """Thread-safe flags a UI or signal handler sets while an engine generator runs.

    stop: finish the current step, save, end. pause: wait (checked between steps). save_now: save a
    checkpoint at the next step boundary, then clear. While a save is blocked (SaveBlocked): retry tries it again,
    save_elsewhere(folder) moves the run there first, stop ends the run without it. `answers_faults`: someone is
    there to answer a SaveBlocked (the window, the CLI, the server); without, a blocked save ends the run at once.
    """

    def __init__(self, *, answers_faults: bool = False) -> None:
        self.stop = threading.Event()
        self.pause = threading.Event()
        self.save_now = threading.Event()
        self.retry = threading.Event()
        self.answers_faults = answers_faults
        self._lock = threading.Lock()
        self._elsewhere = ""

    def save_elsewhere(self, folder: str) -> None:
        """A blocked save: move the run into `folder` and save there (wakes the waiting run like retry)."""
        with self._lock:
            self._elsewhere = str(folder)
        self.retry.set()

    def take_decision(self) -> tuple[bool, str]:
        """(retry asked, the folder to move to or '') -- and clears both, so each answer is acted on once."""
        with self._lock:
            asked, folder, self._elsewhere = self.retry.is_set(), self._elsewhere, ""
            self.retry.clear()
        return asked, folder

    def wait_for_answer(self, poll_s: float = 0.1) -> None:
        """Wait until retry (or save elsewhere) or stop is set."""
        while not self.retry.is_set() and not self.stop.is_set():
            self.stop.wait(poll_s)

    def wait_while_paused(self, poll_s: float = 0.1) -> None:
        while self.pause.is_set() and not self.stop.is_set():
            self.stop.wait(poll_s)


@dataclass
class TextDelta(Event):
    """New text of one sample during streaming generation (never half a character or stop string)."""

    type: ClassVar[str] = "delta"
    sample: int
    text: str


@dataclass
class GenerationStats(Event):
    """One sample finished. finish_reason: length | stop | eos | cancelled."""

    type: ClassVar[str] = "generation"
    sample: int
    text: str
    token_ids: list[int] = field(default_factory=list)
    ttft_ms: float = 0.0
    tokens_per_s: float = 0.0
    finish_reason: str = "length"


@dataclass
class ModelEvaluated(Event):
    """One model measured by an evaluation: `metrics` as the `eval` verb prints them (solve_rate/TYPE, pass@k/TYPE,
    qa_accuracy, bits_per_byte, perplexity...), `saved` the evaluations file that keeps them ('' when not saved)."""

    type: ClassVar[str] = "model_evaluated"
    model: str
    name: str = ""
    kind: str = ""
    step: int | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    saved: str = ""


_STEP_FIELDS = ("type", "step", "total_steps", "elapsed_s", "eta_s")


def event_from_dict(record: dict[str, Any]) -> Event | None:
    """The event a metrics.jsonl record (or a --json line) was written from; None for a type this version does not
    know. Fields a newer version added are ignored."""
    kind = record.get("type")
    if kind == StepMetrics.type:
        return StepMetrics(step=int(record.get("step", 0)), total_steps=int(record.get("total_steps", 0)),
                           metrics={k: v for k, v in record.items() if k not in _STEP_FIELDS},
                           elapsed_s=float(record.get("elapsed_s", 0.0) or 0.0),
                           eta_s=float(record.get("eta_s", 0.0) or 0.0))
    if kind == EvalResult.type:
        return EvalResult(step=int(record.get("step", 0)),
                          metrics={k: v for k, v in record.items() if k not in ("type", "step")})
    cls = _BY_TYPE.get(str(kind))
    if cls is None:
        return None
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in record.items() if k in names})
    except TypeError:  # a required field is missing: a damaged record
        return None


_BY_TYPE: dict[str, type[Event]] = {cls.type: cls for cls in (
    Log, FileVerdict, Started, Sample, CheckpointSaved, SaveBlocked, Finished, Progress, RunFolder, StageStarted,
    DatasetReady, Reset, TextDelta, GenerationStats, ModelEvaluated)}
