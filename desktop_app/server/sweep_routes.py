"""Hyperparameter sweeps over the API, in the workspace's sweeps/ folder (engine/sweep/: Optuna, the optional sweep
extra), next to the training routes:

    POST /api/sweeps                   start a sweep of a run config (as POST /api/runs takes it) -> its id
                                       {"config": {...}, "vary": ["lr=1e-5..1e-3:log", "lora_rank=8,16,32"],
                                        "trials": 20, "metric": "val_loss", "sampler", "pruner", "parallel", "seed"}
    GET  /api/sweeps, /api/sweeps/{id} its state, trials by verdict, the trial running, the best trial so far
    POST /api/sweeps/{id}/stop|resume  stop (the running trial saves), or continue a stopped or interrupted sweep

A sweep started here runs in a thread of the server, one at a time; a sweep found in the folder is described from it.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, ConfigDict

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event
from desktop_app.engine.sweep.runner import NewSweep, ResumeSweep, Sweep, open_sweep, sweep_status
from desktop_app.engine.sweep.spec import SweepSpec
from desktop_app.engine.sweep_folder import is_sweep_dir, sweeps_folder
from desktop_app.engine.workspace import slugify
from desktop_app.server.errors import ApiError
from desktop_app.server.state import get_state
from desktop_app.server.training_routes import RunCreate, build_run_request

router = APIRouter(prefix="/api", tags=["Sweeps"])
FINAL = ("completed", "stopped", "failed")


class SweepCreate(BaseModel):
    """A run config (workspace names as POST /api/runs takes them) and how to search around it."""

    model_config = ConfigDict(extra="forbid")
    name: str = ""
    config: dict[str, Any]
    vary: list[str] = []
    trials: int = 20
    metric: str = "val_loss"
    direction: Literal["auto", "minimize", "maximize"] = "auto"
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    pruner: Literal["median", "hyperband", "halving", "none"] = "median"
    parallel: int = 1
    seed: int = 0
    force: bool = False  # start although preflight says the base run cannot work here


@dataclass
class LiveSweep:
    id: str
    folder: Path
    controls: Controls
    state: str = "starting"  # starting | running | stopping | completed | stopped | failed
    trial: int | None = None  # the trial running (the last one started)
    message: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    thread: threading.Thread | None = None

    def take(self, event: Event) -> None:
        kind = event.type
        if kind == "sweep_start":
            self.state = "running" if self.state == "starting" else self.state
        elif kind == "trial_start":
            self.trial = event.number  # type: ignore[attr-defined]
        elif kind == "finished":
            self.state, self.message = event.reason, event.message  # type: ignore[attr-defined]
            self.result = dict(event.result)  # type: ignore[attr-defined]

    def status(self) -> dict[str, Any]:
        live = {"id": self.id, "state": self.state, "trial": self.trial, "message": self.message,
                "started_by": "api"}
        try:
            return {**sweep_status(self.folder), **live}
        except UserError as exc:  # not written yet, or its database went bad
            return {"path": str(self.folder), **live, "problem": str(exc)}


class SweepManager:
    """The sweeps this server runs (one at a time: trials share the CPU with serving) and those in the folder."""

    def __init__(self, workspace: Any):
        self.folder = sweeps_folder(workspace.root)
        self.live: dict[str, LiveSweep] = {}
        self.lock = threading.Lock()

    def path(self, sweep_id: str) -> Path:
        if not sweep_id or "/" in sweep_id or "\\" in sweep_id or sweep_id.startswith(".") or "\x00" in sweep_id:
            raise ApiError(404, f"no sweep {sweep_id!r}", code="sweep_not_found")
        folder = self.folder / sweep_id
        if not is_sweep_dir(folder) and sweep_id not in self.live:
            raise ApiError(404, f"no sweep {sweep_id!r} in the workspace (GET /api/sweeps lists them)",
                           code="sweep_not_found")
        return folder

    def new_folder(self, name: str) -> Path:
        base = self.folder / slugify(name or "sweep")
        candidate, n = base, 2
        while candidate.exists() or candidate.name in self.live:
            candidate, n = base.with_name(f"{base.name}-{n}"), n + 1
        return candidate

    def start(self, sweep: Sweep) -> LiveSweep:
        """Run an opened sweep in a thread; its setup errors come back here (before its first event)."""
        with self.lock:
            running = [s for s in self.live.values() if s.state not in FINAL]
            if running:
                raise ApiError(409, f"sweep {running[0].id} is running in this server: stop it or wait",
                               code="sweep_running")
            # a checkpoint the disk refuses ends that trial (it continues when the sweep is resumed)
            live = LiveSweep(sweep.sweep_dir.name, sweep.sweep_dir, Controls(answers_faults=False))
            self.live[live.id] = live
        ready: Future[None] = Future()
        live.thread = threading.Thread(target=self.work, args=(live, sweep, ready), name=f"azr-sweep-{live.id}",
                                       daemon=True)
        live.thread.start()
        ready.result()
        return live

    def work(self, live: LiveSweep, sweep: Sweep, ready: Future[None]) -> None:
        try:
            events = sweep.events(live.controls)
            first = next(events, None)
        except Exception as exc:
            live.state, live.message = "failed", str(exc) if isinstance(exc, UserError) else repr(exc)
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            if first is not None:
                live.take(first)
            for event in events:
                live.take(event)
            if live.state not in FINAL:
                live.state = "stopped" if live.controls.stop.is_set() else "completed"
        except Exception as exc:  # a crash in a sweep must not take the server down
            live.state, live.message = "failed", str(exc) if isinstance(exc, UserError) else repr(exc)

    def status(self, sweep_id: str) -> dict[str, Any]:
        folder = self.path(sweep_id)
        live = self.live.get(sweep_id)
        if live is not None:
            return live.status()
        return {"id": sweep_id, **sweep_status(folder), "state": "incomplete", "started_by": "other"}

    def list(self) -> list[dict[str, Any]]:
        found = sorted(p.name for p in self.folder.iterdir() if is_sweep_dir(p)) if self.folder.is_dir() else []
        return [self.status(name) for name in found]

    def control(self, sweep_id: str, action: str) -> dict[str, Any]:
        folder = self.path(sweep_id)
        live = self.live.get(sweep_id)
        if action == "resume":
            if live is not None and live.state not in FINAL:
                raise ApiError(409, f"sweep {sweep_id} is running", code="sweep_running")
            return self.start(open_sweep(ResumeSweep(folder))).status()
        if live is None or live.state in FINAL:
            raise ApiError(409, f"sweep {sweep_id} is not running in this server", code="sweep_not_active")
        live.controls.stop.set()
        live.controls.pause.clear()
        live.state = "stopping"
        return live.status()

    def shutdown(self, timeout: float = 60.0) -> None:
        for live in self.live.values():
            live.controls.stop.set()
        for live in self.live.values():
            if live.thread is not None:
                live.thread.join(timeout)


def manager(app: FastAPI) -> SweepManager:
    """The app's sweeps, made on first use."""
    sweeps = getattr(app.state, "azr_sweeps", None)
    if sweeps is None:
        sweeps = app.state.azr_sweeps = SweepManager(app.state.azr.workspace)
    return sweeps


def shutdown(app: FastAPI) -> None:
    """Stop every sweep this server runs (each running trial saves first) and wait for them."""
    sweeps = getattr(app.state, "azr_sweeps", None)
    if sweeps is not None:
        sweeps.shutdown()


@router.post("/sweeps", status_code=201, summary="Start a hyperparameter sweep of a run config; returns its id")
def start_sweep(body: SweepCreate, request: Request) -> dict[str, Any]:
    state, sweeps = get_state(request), manager(request.app)
    run_request = build_run_request(state.workspace, RunCreate(config=body.config))
    spec = SweepSpec(vary=list(body.vary), trials=body.trials, metric=body.metric, direction=body.direction,
                     sampler=body.sampler, pruner=body.pruner, parallel=body.parallel, seed=body.seed, name=body.name)
    folder = sweeps.new_folder(body.name)
    sweep = open_sweep(NewSweep(run_request, spec), folder)
    errors = sweep.errors()
    if errors and not body.force:
        raise ApiError(422, "the base run cannot work on this machine: " + " ".join(errors)
                       + " (send \"force\": true to start it anyway)", param="config")
    live = sweeps.start(sweep)
    return {**live.status(), "notes": sweep.notes + [f"{f.level}: {f.message}" for f in sweep.findings]}


@router.get("/sweeps", summary="List the workspace's sweeps")
def list_sweeps(request: Request) -> dict[str, Any]:
    return {"sweeps": manager(request.app).list()}


@router.get("/sweeps/{sweep_id}", summary="A sweep's state, its trials by verdict and its best trial")
def sweep_state(sweep_id: str, request: Request) -> dict[str, Any]:
    return manager(request.app).status(sweep_id)


@router.post("/sweeps/{sweep_id}/{action}", summary="stop (the running trial saves) or resume a sweep")
def control_sweep(sweep_id: str, action: Literal["stop", "resume"], request: Request) -> dict[str, Any]:
    return manager(request.app).control(sweep_id, action)
