"""Helpers of the sweep tests (a module name no other conftest shadows): a tiny pretraining run config whose trials
train in a fraction of a second, and a sweep run to its end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from train_helpers import make_dataset, tiny_config

from desktop_app.engine.events import Controls
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep.runner import NewSweep, ResumeSweep, open_sweep
from desktop_app.engine.sweep.spec import SweepSpec
from desktop_app.engine.train.request import RunRequest

# 20 steps, an evaluation every 4 (the pruner's steps), a checkpoint every 4 (a killed trial continues from one)
TRAIN = {"steps": 20, "eval_every": 4, "eval_batches": 2, "save_every": 4, "keep_last": 1, "trackers": []}
LR_RANGE = "lr=1e-4..3e-1:log"  # from far too small to about where these tiny runs diverge


def base_config(folder: Path, **train: Any) -> RunConfig:
    dataset = folder / "ds"
    if not (dataset / "manifest.json").is_file():
        make_dataset(dataset)
    return tiny_config(dataset, **{**TRAIN, **train})


def new_sweep(config: RunConfig, folder: Path, **spec: Any) -> Any:
    return open_sweep(NewSweep(RunRequest(config=config.to_dict()), SweepSpec(**spec)), folder)


def run_to_end(sweep: Any, controls: Controls | None = None) -> list[Any]:
    return list(sweep.events(controls or Controls()))


def resume(folder: Path, **kwargs: Any) -> list[Any]:
    return run_to_end(open_sweep(ResumeSweep(folder, **kwargs)))


def of_type(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]
