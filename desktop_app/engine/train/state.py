"""The trainer's state: what a checkpoint must hold besides weights and optimizer for a resume to continue the
run exactly. One dataclass, saved and restored in one place (`checkpoint_state` / `restore_state`).

trainer_state.json (format_version 1) holds the dataclass's fields plus the schedule position, the data source's
position, the objective's state, the grad scaler, the Python/numpy RNG and the metrics.jsonl byte offset; the
torch RNG states go to rng.safetensors (tensors, no pickle).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from desktop_app.engine.specs import TrainSpec

TRAINER_STATE_VERSION = 1


@dataclass
class TrainerState:
    step: int = 0
    lr_scale: float = 1.0  # the learning rate's factor after non-finite rollbacks
    tokens_seen: int = 0
    elapsed_s: float = 0.0  # training time of the sessions before this one (from the checkpoint resumed)
    best_val_loss: float | None = None
    last_val_loss: float | None = None
    evals_since_best: int = 0
    nonfinite_count: int = 0
    nonfinite_events: list[dict[str, Any]] = field(default_factory=list)
    micro_batch: int = 1
    first_step_s: float | None = None  # a time-limited run's clock after its first step: its decay starts there

    def record_eval(self, val: float) -> None:
        """A finite validation loss: the best so far, or one more evaluation without improvement."""
        self.last_val_loss = val
        if self.best_val_loss is None or val < self.best_val_loss:
            self.best_val_loss = val
            self.evals_since_best = 0
        else:
            self.evals_since_best += 1


@dataclass
class SavedParts:
    """What trainer_state.json records beside TrainerState (the loop hands them over at a save)."""

    data: dict[str, Any]  # the batch source's state_dict()
    objective: dict[str, Any] | None  # the objective's state_dict()
    grad_scaler: dict[str, Any] | None
    metrics_offset: int  # metrics.jsonl bytes the checkpoint has seen
    elapsed_s: float  # training time up to now, earlier sessions included
    device: torch.device


def capture_rng(device: torch.device) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every RNG the run draws from: torch's (and CUDA's) as tensors, Python's and numpy's as JSON."""
    tensors = {"torch_cpu": torch.get_rng_state()}
    if device.type == "cuda":
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda_{i}"] = state
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    meta = {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
    }
    return tensors, meta


def restore_rng(tensors: dict[str, torch.Tensor], meta: dict[str, Any], device: torch.device) -> None:
    if "torch_cpu" in tensors:
        torch.set_rng_state(tensors["torch_cpu"])
    if device.type == "cuda":
        states = [tensors[k] for k in sorted(k for k in tensors if k.startswith("cuda_"))]
        if states and len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)
    if meta.get("python"):
        version, internal, gauss = meta["python"]
        random.setstate((version, tuple(internal), gauss))
    if meta.get("numpy"):
        name, keys, pos, has_gauss, cached = meta["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def checkpoint_state(state: TrainerState, spec: TrainSpec, parts: SavedParts
                     ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(trainer_state.json's content, the RNG tensors for rng.safetensors) at this moment."""
    rng_tensors, rng_meta = capture_rng(parts.device)
    saved = {
        "format_version": TRAINER_STATE_VERSION, "step": state.step, "total_steps": spec.steps,
        "lr_scale": state.lr_scale, "schedule": {"name": spec.schedule, "step": state.step},
        "tokens_seen": state.tokens_seen, "elapsed_s": parts.elapsed_s, "data": parts.data,
        "metrics_offset": parts.metrics_offset, "best_val_loss": state.best_val_loss,
        "last_val_loss": state.last_val_loss, "evals_since_best": state.evals_since_best,
        "nonfinite_count": state.nonfinite_count, "nonfinite_events": state.nonfinite_events,
        "micro_batch": state.micro_batch, "first_step_s": state.first_step_s, "grad_scaler": parts.grad_scaler,
        "rng": rng_meta,
        "threads": torch.get_num_threads(), "device": parts.device.type, "objective": parts.objective,
    }
    return saved, rng_tensors


def restore_state(saved: dict[str, Any], rng_tensors: dict[str, torch.Tensor], spec: TrainSpec,
                  device: torch.device) -> TrainerState:
    """TrainerState from a checkpoint's trainer_state.json (and the RNGs set back to where they were)."""
    micro = int(saved.get("micro_batch", spec.micro_batch))
    if micro > spec.batch_size or spec.batch_size % micro:
        micro = spec.micro_batch  # batch size changed on resume (accepted config change)
    restore_rng(rng_tensors, saved.get("rng", {}), device)
    return TrainerState(
        step=int(saved["step"]), lr_scale=float(saved.get("lr_scale", 1.0)),
        tokens_seen=int(saved.get("tokens_seen", 0)), elapsed_s=float(saved.get("elapsed_s", 0.0)),
        best_val_loss=saved.get("best_val_loss"), last_val_loss=saved.get("last_val_loss"),
        evals_since_best=int(saved.get("evals_since_best", 0)), nonfinite_count=int(saved.get("nonfinite_count", 0)),
        nonfinite_events=list(saved.get("nonfinite_events", [])), micro_batch=micro,
        first_step_s=saved.get("first_step_s"))
