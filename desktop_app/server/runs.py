"""Training runs started through the API, and the status of every run in the workspace.

A run started here is the engine's `train()` generator iterated in a thread of the server process, in
a `runs/<id>/` folder of the same workspace as the window (so the Library shows it, and runs the
window started show up here). Its controls (stop / pause / save now) are the engine's flags; its
status is the last events it yielded. A run this process did not start is described from its folder
(metrics.jsonl, checkpoints): "incomplete" then means it is training elsewhere or was interrupted.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.engine import run_folder
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls
from desktop_app.server.errors import ApiError

if TYPE_CHECKING:
    from desktop_app.engine.session import Session

MAX_LIVE_RUNS = 2  # training shares the CPU with decoding; more at once only makes each slower
BUSY_ELSEWHERE_S = 120  # a run without a final event that logged this recently is taken as still training
_STEP_KEYS = ("type", "step", "total_steps", "elapsed_s", "eta_s")
FINAL_STATES = ("completed", "stopped", "early_stopped", "failed", "cancelled")


@dataclass
class LiveRun:
    id: str
    run_dir: Path
    controls: Controls
    state: str = "starting"  # starting | running | paused | stopping | completed | stopped | early_stopped | failed
    step: int = 0
    total_steps: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    eval: dict[str, float] = field(default_factory=dict)
    eta_s: float | None = None
    elapsed_s: float = 0.0
    message: str = ""
    last_checkpoint: str | None = None
    started_at: float = field(default_factory=time.time)
    thread: threading.Thread | None = None

    @property
    def live(self) -> bool:
        return self.state not in FINAL_STATES

    def status(self) -> dict[str, Any]:
        return {"id": self.id, "path": str(self.run_dir), "state": self.state, "step": self.step,
                "total_steps": self.total_steps, "metrics": self.metrics, "eval": self.eval, "eta_s": self.eta_s,
                "elapsed_s": self.elapsed_s, "message": self.message, "last_checkpoint": self.last_checkpoint,
                "started_by": "api", "paused": self.controls.pause.is_set()}

    def take(self, event: Any) -> None:
        """Update the status from one training event."""
        kind = event.type
        if kind == "step":
            self.step, self.total_steps = event.step, event.total_steps
            self.metrics, self.eta_s, self.elapsed_s = dict(event.metrics), event.eta_s, event.elapsed_s
            if self.state == "starting":
                self.state = "running"
        elif kind == "eval":
            self.eval = dict(event.metrics)
        elif kind == "checkpoint":
            self.last_checkpoint = event.path
        elif kind == "save_blocked":  # waits for POST .../retry (or stop); the message says what to free
            self.state, self.message = "save_blocked", event.message
        elif kind == "log" and event.message.startswith("paused at step"):
            self.state = "paused"
        elif kind == "log" and event.message == "resumed" and self.state == "paused":
            self.state = "running"
        elif kind == "finished":
            self.state, self.message = event.reason, event.message
            self.step = max(self.step, event.step)
            self.eta_s = 0.0


def disk_status(run_dir: Path) -> dict[str, Any]:
    """What a run's folder says about it (for runs this server did not start)."""

    summary = run_folder.MetricsSummary.of(run_folder.read_metrics(run_dir))
    last = summary.last_step
    step, total, eta = int(last.get("step", 0)), int(last.get("total_steps", 0)), last.get("eta_s")
    metrics = {k: v for k, v in last.items() if k not in _STEP_KEYS}
    eval_metrics = {k: v for k, v in summary.last_eval.items() if k not in ("type", "step")}
    state, message = "incomplete", ""
    if summary.finished is not None:
        state = str(summary.finished.get("reason", "finished"))
        message = str(summary.finished.get("message", ""))
        step = max(step, int(summary.finished.get("step", 0) or 0))
    if not total:
        recorded = run_folder.read_json(run_dir / run_folder.RUN_FILE)
        train = recorded.get("train") if isinstance(recorded, dict) else None
        total = int(train.get("steps", 0)) if isinstance(train, dict) and isinstance(train.get("steps"), int) else 0
    committed = run_folder.list_committed(run_dir)
    if state == "incomplete" and not (run_dir / run_folder.RUN_FILE).exists():
        state = "unknown"
    return {"id": run_dir.name, "path": str(run_dir), "state": state, "step": step, "total_steps": total,
            "metrics": metrics, "eval": eval_metrics, "eta_s": eta if state == "incomplete" else 0.0,
            "message": message, "last_checkpoint": str(committed[-1]) if committed else None, "started_by": "other",
            "paused": False}


class RunManager:
    """Starts runs in threads, answers status, forwards controls; `shutdown` stops and waits."""

    def __init__(self, workspace: Any):
        self.workspace = workspace
        self.live: dict[str, LiveRun] = {}
        self._lock = threading.Lock()

    def run_dir(self, run_id: str) -> Path:
        """runs/<run_id> of the workspace; 404 for anything else (no paths, no '..')."""
        if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith(".") or "\x00" in run_id:
            raise ApiError(404, f"no run {run_id!r}", param="id", code="run_not_found")
        folder = self.workspace.folder("runs") / run_id
        if not folder.is_dir():
            raise ApiError(404, f"no run {run_id!r} in the workspace (GET /api/runs lists them)", param="id",
                           code="run_not_found")
        return folder

    def start(self, session: Session) -> LiveRun:
        """Run an opened engine session (a new run, or a resume) in a thread of its own (blocks until its setup is
        done; raises its setup errors); on several processes where the session launches them, followed and
        controlled the same way."""
        run_dir = session.run_dir
        assert run_dir is not None
        config = session.prepared.config if session.prepared is not None else session.config
        with self._lock:
            running = [r for r in self.live.values() if r.live]
            if len(running) >= MAX_LIVE_RUNS:
                raise ApiError(409, f"{len(running)} runs are already training in this server (at most "
                                    f"{MAX_LIVE_RUNS}); stop one or wait", code="too_many_runs")
            existing = self.live.get(run_dir.name)
            if existing is not None and existing.live:
                raise ApiError(409, f"run {run_dir.name} is already training", code="run_active")
            # answers_faults: a full disk while saving pauses the run ("save_blocked") until a client says retry
            run = LiveRun(id=run_dir.name, run_dir=run_dir, controls=Controls(answers_faults=True),
                          total_steps=int(config.train.get("steps", 0) or 0) if config is not None else 0)
            self.live[run.id] = run
        # The whole generator runs in the run's thread (torch thread counts are per thread), but setup
        # problems (bad config, dataset, resume mismatch) raise before the first event: wait for that
        # first event so they come back in the HTTP response instead of as a run that failed silently.
        ready: Future[None] = Future()
        run.thread = threading.Thread(target=self._work, args=(run, session, ready),
                                      name=f"azr-train-{run.id}", daemon=True)
        run.thread.start()
        ready.result()
        return run

    def _work(self, run: LiveRun, session: Session, ready: Future[None]) -> None:
        try:
            events = session.events(run.controls)
            first = next(events, None)
        except Exception as exc:
            run.state = "failed"
            run.message = str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            if first is not None:
                run.take(first)
            for event in events:
                run.take(event)
            if run.live:  # the generator ended without a Finished event
                run.state = "stopped" if run.controls.stop.is_set() else "completed"
        except UserError as exc:
            run.state, run.message = "failed", str(exc)
        except Exception as exc:  # a crash in the loop must not take the server down
            run.state, run.message = "failed", f"{type(exc).__name__}: {exc}"

    def status(self, run_id: str) -> dict[str, Any]:
        run_dir = self.run_dir(run_id)
        live = self.live.get(run_id)
        return live.status() if live is not None else disk_status(run_dir)

    def list(self) -> list[dict[str, Any]]:
        folder = self.workspace.folder("runs")
        items = self.workspace.items("runs") if folder.is_dir() else []
        return [self.status(p.name) for p in items if p.is_dir()]

    def control(self, run_id: str, action: str) -> dict[str, Any]:
        run_dir = self.run_dir(run_id)
        run = self.live.get(run_id)
        if action == "resume" and (run is None or not run.live):
            return self._restart(run_id, run_dir)
        if run is None or not run.live:
            raise ApiError(409, f"run {run_id} is not training in this server, so it cannot be told to {action} "
                                "(runs started in the window are controlled there)", code="run_not_active")
        if action == "stop":
            run.controls.stop.set()
            run.controls.pause.clear()
            run.state = "stopping"
        elif action == "pause":
            run.controls.pause.set()
        elif action == "resume":
            run.controls.pause.clear()
            if run.state == "paused":
                run.state = "running"
        elif action == "save":
            run.controls.save_now.set()
        elif action == "retry":
            if run.state != "save_blocked":
                raise ApiError(409, f"run {run_id} is not waiting on a blocked save ({run.state}); retry is for a "
                                    "run whose checkpoint the disk refused", code="nothing_to_retry")
            run.controls.retry.set()
            run.state, run.message = "running", ""
        return run.status()

    def _restart(self, run_id: str, run_dir: Path) -> dict[str, Any]:
        """resume on a run that is not training: continue it from its newest checkpoint."""
        from desktop_app.engine.session import ResumeRun, launched_processes, open_session  # lazy: numpy

        state = self.status(run_id)["state"]
        if state == "completed":
            raise ApiError(409, f"run {run_id} is complete: nothing to resume", code="run_complete")
        metrics = run_dir / "metrics.jsonl"
        age = time.time() - metrics.stat().st_mtime if metrics.exists() else None
        if state == "incomplete" and run_id not in self.live and age is not None and age < BUSY_ELSEWHERE_S:
            # No lock marks a run in training, but a run that wrote metrics moments ago most likely is
            # (in the window or the CLI): two trainers on one folder would corrupt it.
            raise ApiError(409, f"run {run_id} wrote metrics {age:.0f} s ago: it seems to be training elsewhere "
                                "(the window or the CLI); stop it there first", code="run_busy")
        if not (run_dir / "run.json").is_file():
            raise ApiError(409, f"run {run_id} has no run.json: it cannot be resumed", code="run_not_resumable")
        return self.start(open_session(ResumeRun(run_dir, processes=launched_processes(run_dir) or 1))).status()

    def shutdown(self, timeout: float = 60.0) -> None:
        """Stop every run (each saves a checkpoint at its next step) and wait for them."""
        runs = [r for r in self.live.values() if r.thread is not None and r.thread.is_alive()]
        for run in runs:
            run.controls.stop.set()
            run.controls.pause.clear()
        deadline = time.monotonic() + timeout
        for run in runs:
            assert run.thread is not None
            run.thread.join(max(0.0, deadline - time.monotonic()))
