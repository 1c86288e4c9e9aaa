"""Run tracking through the libraries people already look at: TensorBoard, MLflow, Weights & Biases.

Every recorded event still goes to RUN/metrics.jsonl first (run_folder.MetricsWriter); `TrackedMetrics` is that writer
with trackers behind it, one small class per library, each using the library's own client:
    tensorboard  event files in RUN itself (`tensorboard --logdir RUN`, or the workspace's runs/ folder for all runs):
                 scalars, the run config as hyperparameters (and as text), the samples as text
    mlflow       an MLflow run in RUN/mlruns (a local file store), or in the store or server MLFLOW_TRACKING_URI names
    wandb        a W&B run, offline in RUN/wandb (`wandb sync RUN/wandb/offline-run-*` uploads it later) unless the
                 user's WANDB_MODE says otherwise
Scalars are named train/NAME (logged steps) and eval/NAME (evaluations), at the run's step.

Only process 0 writes the run folder (the loop opens this writer there only). A resumed run continues the same tracked
run: RUN/tracking.json (written here only) keeps the MLflow and W&B run ids, and TensorBoard drops what the run
wrote after the checkpoint (purge_step). MLflow and W&B cannot drop logged values, so when a resume (after a crash)
or a rollback goes back before steps they were sent, each continues in a new tracked run, "NAME (from step N)",
which first receives metrics.jsonl's history up to that step: every step appears once, with the values the run
kept, and the abandoned run stays, tagged with the one that replaced it. Tracking never fails a run: a tracker whose
library is missing, or that breaks, is dropped with one warning. The libraries are imported only when a run uses
them (the optional tracking extra), so this module is importable without them.

A sweep's trial (its run folder holds the sweep's note, engine/sweep_folder.py) is tracked under its sweep: an MLflow
child run of the sweep's parent run (`sweep_group` makes that once, in SWEEP/mlruns), a W&B run in the sweep's group,
and TensorBoard hyperparameters that are the settings the trial tried, beside the sweep's metric (`tensorboard
--logdir SWEEP/trials` compares them in its HParams tab).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from desktop_app.engine.events import Log
from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.run_folder import METRICS_FILE, MetricsWriter, read_json, read_metrics
from desktop_app.engine.specs import TRACKERS, RunConfig, SpecError
from desktop_app.engine.sweep_folder import read_trial

TRACKING_FILE = "tracking.json"
PROJECT = "azr-model-trainer"  # the MLflow experiment and W&B project, unless the user's environment names one
INSTALL_HINT = "pip install azr-model-trainer[tracking]"
_NAMES = {"tensorboard": "TensorBoard", "mlflow": "MLflow", "wandb": "Weights & Biases"}
_MODULES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}
_NOT_SCALARS = ("type", "step", "total_steps", "elapsed_s", "eta_s")
_STATUS = {"completed": "FINISHED", "early_stopped": "FINISHED", "failed": "FAILED"}  # else KILLED (stopped, closed)
log = logging.getLogger(__name__)


def installed(name: str) -> bool:
    """Whether a tracker's library is importable here (without importing it)."""
    try:
        return importlib.util.find_spec(_MODULES[name]) is not None
    except (ImportError, ValueError):
        return False


def installed_trackers() -> list[str]:
    return [name for name in TRACKERS if installed(name)]


def choice_labels() -> dict[str, tuple[str, str]]:
    """(words, tooltip) of each tracker for a form's check boxes: its name, and whether it is installed here."""
    out = {}
    for name in TRACKERS:
        ok = installed(name)
        out[name] = (_NAMES[name] + ("" if ok else " (not installed)"),
                     "installed here" if ok else f"not installed here: {INSTALL_HINT}")
    return out


def parse_trackers(text: str) -> list[str]:
    """`--track tensorboard,mlflow` as a list; 'none' (or nothing) keeps the run in metrics.jsonl only."""
    names = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    if names in ([], ["none"]):
        return []
    if any(n not in TRACKERS for n in names) or len(set(names)) != len(names):
        raise SpecError([f"--track takes {', '.join(TRACKERS)} (comma-separated, each once) or none, got {text!r}"])
    return names


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A run config as flat hyperparameters ("train.lr": 0.001): numbers, strings and booleans; lists as JSON."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, name + "."))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        elif value is not None:
            out[name] = json.dumps(value)
    return out


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """A step or eval record's metrics as the trackers log them: numbers only, named train/NAME or eval/NAME."""
    prefix = "train/" if record.get("type") == "step" else "eval/"
    return {prefix + k: float(v) for k, v in record.items()
            if k not in _NOT_SCALARS and isinstance(v, (int, float)) and not isinstance(v, bool)}


# --- one writer per library ------------------------------------------------------------------------------------

class Tracker:
    """One library's writer. The base does nothing, so a library logs only what it can keep."""

    name: ClassVar[str] = ""

    def log_scalars(self, step: int, values: dict[str, float]) -> None:
        pass

    def log_text(self, step: int, prompt: str, text: str) -> None:
        pass

    def rewind(self, step: int, kept: list[dict[str, Any]]) -> None:
        """The run went back to `step` (a resume or rollback to a checkpoint): what comes next replaces what followed
        it. `kept`: metrics.jsonl's records up to there."""

    def close(self, outcome: str) -> None:
        """The run ended: outcome is its Finished reason ('' when it ended without one: stopped, window closed)."""

    def replay(self, kept: list[dict[str, Any]]) -> None:
        """Send metrics.jsonl's kept records to a new tracked run, as they were sent the first time."""
        for record in kept:
            if record.get("type") in ("step", "eval"):
                self.log_scalars(int(record.get("step", 0)), scalars(record))
            elif record.get("type") == "sample":
                self.log_text(int(record.get("step", 0)), str(record.get("prompt", "")), str(record.get("text", "")))

    def saved(self) -> dict[str, Any]:
        """What tracking.json keeps for a resume to continue this tracked run."""
        return {}


class TensorBoardTracker(Tracker):
    """torch's SummaryWriter into RUN itself; a resume purges what was written after the checkpoint's step."""

    name = "tensorboard"

    def __init__(self, run_dir: Path, config: dict[str, Any], resume_step: int | None,
                 group: dict[str, Any] | None = None):
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        self.run_dir, self.make = run_dir, SummaryWriter
        # purge_step: TensorBoard's readers drop the earlier sessions' events from this step on
        self.writer = SummaryWriter(str(run_dir), purge_step=0 if resume_step is None else resume_step + 1)
        if resume_step is None:
            values, metrics = flat_config(config), {"train/loss": None, "eval/val_loss": None}
            if group:  # a sweep's trial: the settings it tried, side by side with the other trials'
                values = {**group.get("params", {}), "sweep": str(group.get("sweep", "")), "trial": group["trial"]}
                metrics[f"eval/{group.get('metric') or 'val_loss'}"] = None
            for summary in hparams(values, metrics):
                self.writer.file_writer.add_summary(summary)
            self.writer.add_text("run_config", "```\n" + json.dumps(config, indent=2) + "\n```", 0)

    def log_scalars(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def log_text(self, step: int, prompt: str, text: str) -> None:
        self.writer.add_text("samples", f"**{prompt or '(start of text)'}**\n\n{text}", step)

    def rewind(self, step: int, kept: list[dict[str, Any]]) -> None:
        self.writer.close()
        self.writer = self.make(str(self.run_dir), purge_step=step + 1)

    def close(self, outcome: str) -> None:
        self.writer.close()


class MLflowTracker(Tracker):
    """An MLflow run through MlflowClient: RUN/mlruns unless MLFLOW_TRACKING_URI names a store or server."""

    name = "mlflow"

    def __init__(self, run_dir: Path, config: dict[str, Any], saved: dict[str, Any] | None,
                 group: dict[str, Any] | None = None):
        # ours is a local file store, which MLflow 3 keeps behind an opt-in; and nothing of a run leaves the machine
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow import MlflowClient

        saved, group = saved or {}, group or {}
        self.run_dir, self.config = run_dir, config
        # a sweep's trials share the sweep's store, where their parent run is
        self.uri = str(saved.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
                       or group.get("mlflow_tracking_uri") or (run_dir / "mlruns").resolve().as_uri())
        self.tags = {"mlflow.parentRunId": str(group["mlflow_parent_run_id"]), "azr.sweep": str(group["sweep"]),
                     "azr.trial": str(group["trial"])} if group.get("mlflow_parent_run_id") else {}
        self.client = MlflowClient(tracking_uri=self.uri)
        self.run_id = str(saved.get("run_id") or "")
        if self.run_id:
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = self._create(run_dir.name, {})

    def _create(self, run_name: str, tags: dict[str, str]) -> str:
        from mlflow.entities import Param

        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        run_id = self.client.create_run(experiment_id, run_name=run_name,
                                        tags={"azr.run_dir": str(self.run_dir.resolve()), **self.tags,
                                              **tags}).info.run_id
        params = [Param(k[:250], str(v)[:500]) for k, v in flat_config(self.config).items()]
        for at in range(0, len(params), 100):  # MLflow takes at most 100 parameters a call
            self.client.log_batch(run_id, params=params[at:at + 100])
        return run_id

    def log_scalars(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def rewind(self, step: int, kept: list[dict[str, Any]]) -> None:
        old = self.run_id
        self.run_id = self._create(f"{self.run_dir.name} (from step {step})",
                                   {"azr.resumed_from_run": old, "azr.resumed_at_step": str(step)})
        self.replay(kept)
        self.client.set_tag(old, "azr.superseded_by", self.run_id)
        self.client.set_terminated(old, "KILLED")

    def replay(self, kept: list[dict[str, Any]]) -> None:
        """The kept history in batches of MLflow's 1,000 metrics a call (a long run's resume stays quick)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, int(r.get("step", 0))) for r in kept if r.get("type") in ("step", "eval")
                   for k, v in scalars(r).items()]
        for at in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[at:at + 1000])
        for r in kept:
            if r.get("type") == "sample":
                self.log_text(int(r.get("step", 0)), str(r.get("prompt", "")), str(r.get("text", "")))

    def log_text(self, step: int, prompt: str, text: str) -> None:
        self.client.log_text(self.run_id, f"{prompt}\n---\n{text}\n", f"samples/step_{step:07d}.txt")

    def close(self, outcome: str) -> None:
        self.client.set_terminated(self.run_id, _STATUS.get(outcome, "KILLED"))

    def saved(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "tracking_uri": self.uri}


class WandbTracker(Tracker):
    """A W&B run, offline in RUN/wandb unless WANDB_MODE says otherwise; a resume continues it by its id."""

    name = "wandb"

    def __init__(self, run_dir: Path, config: dict[str, Any], saved: dict[str, Any] | None,
                 group: dict[str, Any] | None = None):
        self.run_dir, self.config = run_dir, config
        # a sweep's trial: in the sweep's group
        self.grouping = {"group": str(group["sweep"]), "job_type": "trial"} if group else {}
        self.run = self._start(str((saved or {}).get("run_id") or ""), run_dir.name, config)

    def _start(self, run_id: str, name: str, config: dict[str, Any]) -> Any:
        import wandb
        from wandb.sdk.lib.runid import generate_id

        settings = wandb.Settings(console="off", silent=True, disable_git=True, save_code=False,
                                  x_disable_stats=True)
        return wandb.init(project=os.environ.get("WANDB_PROJECT") or PROJECT, dir=str(self.run_dir),
                          id=run_id or generate_id(), name=name, config=config, resume="allow" if run_id else None,
                          mode=os.environ.get("WANDB_MODE") or "offline", reinit="create_new", settings=settings,
                          **self.grouping)

    def log_scalars(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def rewind(self, step: int, kept: list[dict[str, Any]]) -> None:
        old = self.run
        old.summary["azr_superseded_at_step"] = step
        old.finish(exit_code=1)
        self.run = self._start("", f"{self.run_dir.name} (from step {step})",
                               {**self.config, "azr_resumed_from_run": old.id, "azr_resumed_at_step": step})
        self.replay(kept)

    def close(self, outcome: str) -> None:
        self.run.finish(exit_code=1 if outcome == "failed" else 0)

    def saved(self) -> dict[str, Any]:
        return {"run_id": self.run.id}


def scalars_after(path: Path, offset: int) -> bool:
    """Whether metrics.jsonl holds a step or evaluation record after byte `offset` (records a tracker was sent)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            tail = fh.read()
    except OSError:
        return False
    for line in tail.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("type") in ("step", "eval"):
                return True
    return False


def open_tracker(name: str, run_dir: Path, config: dict[str, Any], resume_step: int | None,
                 saved: dict[str, Any] | None) -> Tracker:
    group = read_trial(run_dir)  # a sweep's trial is tracked under its sweep
    if name == "tensorboard":
        return TensorBoardTracker(run_dir, config, resume_step, group)
    if name == "mlflow":
        return MLflowTracker(run_dir, config, saved, group)
    return WandbTracker(run_dir, config, saved, group)


def where_text(tracker: Tracker, run_dir: Path) -> str:
    """Where a person finds the tracked run."""
    if isinstance(tracker, MLflowTracker):
        return f"MLflow run {tracker.run_id} (mlflow ui --backend-store-uri {tracker.uri})"
    if isinstance(tracker, WandbTracker):
        return f"W&B run {tracker.run.id} in {run_dir / 'wandb'} (wandb sync uploads an offline run)"
    return f"TensorBoard (tensorboard --logdir {run_dir})"


def open_trackers(run_dir: Path, config: RunConfig, resume_step: int | None) -> tuple[list[Tracker], list[Log]]:
    """The trackers of a run's TrainSpec.trackers that can write here, and a note on each (where it is, or why not).
    `resume_step`: the checkpoint's step a resumed run continues from (None: a fresh start)."""
    try:
        wanted = config.train_spec().trackers
    except SpecError:
        wanted = []
    if int(os.environ.get("RANK", "0") or 0) != 0:  # only process 0 writes the run folder
        return [], []
    previous = read_json(run_dir / TRACKING_FILE) if resume_step is not None else None
    previous = previous if isinstance(previous, dict) else {}
    trackers: list[Tracker] = []
    notes: list[Log] = []
    for name in wanted:
        if not installed(name):
            # TensorBoard is on by default "where installed"; the others were asked for by name
            level = "info" if name == "tensorboard" else "warning"
            notes.append(Log(level, f"{_NAMES[name]} is not installed, so this run is not tracked there "
                                    f"({INSTALL_HINT})"))
            continue
        try:
            tracker = open_tracker(name, run_dir, config.to_dict(), resume_step, previous.get(name))
        except Exception as exc:  # never fail a run: its own metrics.jsonl still records everything
            notes.append(Log("warning", f"cannot track this run in {_NAMES[name]} ({type(exc).__name__}: {exc}); "
                                        "training goes on without it"))
            continue
        trackers.append(tracker)
        notes.append(Log("info", f"tracking in {where_text(tracker, run_dir)}"))
    _save_ids(run_dir, trackers, previous)
    return trackers, notes


def _save_ids(run_dir: Path, trackers: list[Tracker], previous: dict[str, Any]) -> None:
    ids = {**previous, **{t.name: t.saved() for t in trackers if t.saved()}}
    if ids:
        with contextlib.suppress(OSError):
            atomic_write_text(run_dir / TRACKING_FILE, json.dumps(ids, indent=2) + "\n")


# --- a sweep's parent run ---------------------------------------------------------------------------------------

def sweep_group(sweep_dir: Path, name: str, trackers: list[str], metric: str,
                settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """What each trial's note tells its trackers: the sweep's name and metric, and with MLflow the sweep's parent run
    (made once in SWEEP/mlruns, or MLFLOW_TRACKING_URI's store; SWEEP/tracking.json keeps its id, so a resumed sweep
    goes on under it). Never fails a sweep: a parent run that cannot be made leaves the trials ungrouped there."""
    group: dict[str, Any] = {"sweep": name, "sweep_dir": str(Path(sweep_dir).resolve()), "metric": metric}
    if "mlflow" not in trackers or not installed("mlflow") or int(os.environ.get("RANK", "0") or 0) != 0:
        return group
    saved = read_json(Path(sweep_dir) / TRACKING_FILE)
    saved = saved if isinstance(saved, dict) else {}
    try:
        parent = MLflowTracker(Path(sweep_dir), {"sweep": settings or {"name": name, "metric": metric}},
                               saved.get("mlflow"))
    except Exception as exc:  # the trials still track themselves
        log.warning("cannot make the sweep's MLflow run (%s: %s)", type(exc).__name__, exc)
        return group
    _save_ids(Path(sweep_dir), [parent], saved)
    return {**group, "mlflow_parent_run_id": parent.run_id, "mlflow_tracking_uri": parent.uri}


def end_sweep_group(sweep_dir: Path, group: dict[str, Any], outcome: str, best: dict[str, Any] | None) -> None:
    """The sweep ended (outcome: completed | stopped): its parent run gets the best trial's value and settings."""
    run_id = group.get("mlflow_parent_run_id")
    if not run_id:
        return
    try:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=str(group["mlflow_tracking_uri"]))
        if best:
            client.log_metric(run_id, f"best/{best.get('metric', 'value')}", float(best["value"]),
                              step=int(best["number"]))
            client.set_tag(run_id, "azr.best_trial", str(best["number"]))
            for key, value in (best.get("params") or {}).items():
                client.set_tag(run_id, f"best.{key}", str(value))
        client.set_terminated(run_id, _STATUS.get(outcome, "KILLED"))
    except Exception as exc:  # tracking never fails the sweep
        log.warning("cannot close the sweep's MLflow run %s in %s (%s: %s)", run_id, sweep_dir, type(exc).__name__, exc)


# --- metrics.jsonl with trackers behind it ------------------------------------------------------------------------

class TrackedMetrics(MetricsWriter):
    """metrics.jsonl (written first, as before), then every tracker. A tracker that raises is dropped; its warning is
    recorded in metrics.jsonl, logged once, and said live by the loop (`take_warnings`, between steps)."""

    def __init__(self, run_dir: str | Path, config: RunConfig, keep_bytes: int | None = None,
                 resume_step: int | None = None):
        # steps after the checkpoint were sent to the trackers already (the run crashed or was killed after it)
        sent_past = keep_bytes is not None and scalars_after(Path(run_dir) / METRICS_FILE, keep_bytes)
        super().__init__(run_dir, keep_bytes=keep_bytes)
        self.run_dir = Path(run_dir)
        self.outcome = ""
        self.said: list[str] = []  # warnings not yet taken by the loop
        self.trackers, self.notes = open_trackers(self.run_dir, config, resume_step)
        if sent_past and resume_step is not None:
            self._rewind(resume_step, read_metrics(self.run_dir), opened=True)

    def write(self, record: dict[str, Any]) -> str | None:
        problem = super().write(record)
        kind = record.get("type")
        if kind == "finished":
            self.outcome = str(record.get("reason", ""))
        if kind in ("step", "eval"):
            values = scalars(record)
            self._each(lambda t: t.log_scalars(int(record.get("step", 0)), values))
        elif kind == "sample":
            self._each(lambda t: t.log_text(int(record.get("step", 0)), str(record.get("prompt", "")),
                                            str(record.get("text", ""))))
        return problem

    def truncate(self, offset: int) -> None:
        """A rollback to a checkpoint: metrics.jsonl is cut back, and every tracker rewinds to its step."""
        super().truncate(offset)
        kept = read_metrics(self.run_dir, upto_bytes=offset)
        self._rewind(max((int(r.get("step", 0)) for r in kept if r.get("type") == "step"), default=0), kept)

    def _rewind(self, step: int, kept: list[dict[str, Any]], *, opened: bool = False) -> None:
        """Every tracker back to `step`, given metrics.jsonl's `kept` records (`opened`: TensorBoard purged it when
        it opened), the new ids kept."""
        self._each(lambda t: None if opened and isinstance(t, TensorBoardTracker) else t.rewind(step, kept))
        previous = read_json(self.run_dir / TRACKING_FILE)
        _save_ids(self.run_dir, self.trackers, previous if isinstance(previous, dict) else {})
        for tracker in self.trackers:
            if not isinstance(tracker, TensorBoardTracker):
                message = (f"{_NAMES[tracker.name]} had steps after step {step} already: tracking goes on in "
                           f"{where_text(tracker, self.run_dir)}, from the history up to step {step}")
                if opened:  # said with the other tracking notes as the run starts
                    self.notes.append(Log("info", message))
                else:  # a rollback mid-run: said live, next to its own warning
                    self.said.append(message)

    def close(self) -> None:
        super().close()
        outcome, self.outcome = self.outcome, ""
        self._each(lambda t: t.close(outcome))
        self.trackers = []

    def _each(self, call: Any) -> None:
        for tracker in list(self.trackers):
            try:
                call(tracker)
            except Exception as exc:  # a tracker never fails the run: drop it, say so once
                self.trackers.remove(tracker)
                message = (f"{_NAMES[tracker.name]} stopped tracking this run ({type(exc).__name__}: {exc}); "
                           "metrics.jsonl still records everything")
                log.warning(message)
                super().write(Log("warning", message).to_dict())
                self.said.append(message)

    def take_warnings(self) -> list[str]:
        said, self.said = self.said, []
        return said


# --- TensorBoard for a run folder (the window's "Open in TensorBoard") ----------------------------------------------

def has_event_files(run_dir: str | Path) -> bool:
    return any(Path(run_dir).glob("events.out.tfevents.*"))


def free_port() -> int:
    """A TCP port nothing listens on now, on this machine only."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Whether something on this machine accepts connections on `port` (TensorBoard is ready to show)."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True
    return False


def tensorboard_command(logdir: str | Path, port: int) -> list[str]:
    """TensorBoard serving `logdir` on this machine only: the installed command, or this Python's module."""
    args = ["--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port)]
    exe = shutil.which("tensorboard") if getattr(sys, "frozen", False) else None
    return [exe, *args] if exe else [sys.executable, "-m", "tensorboard.main", *args]
