"""One train() call as an object: its config, folder, controls, trainer state and parts. The loop's pieces and the
checkpoint functions (state.py) are small functions of it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.engine import run_folder
from desktop_app.engine.events import Controls, Event, Log
from desktop_app.engine.objectives.base import Objective
from desktop_app.engine.run_folder import MetricsWriter
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train import distributed as dist_mod
from desktop_app.engine.train.distributed import DistContext
from desktop_app.engine.train.optim import optimizer_state_from_flat, optimizer_state_to_flat
from desktop_app.engine.train.state import SavedParts, TrainerState, checkpoint_state, restore_state
from desktop_app.engine.train.sync import SyncedControls

if TYPE_CHECKING:
    from desktop_app.engine.train.setup import Parts


@dataclass
class Run:
    """One train() call: its config, folder, controls and state; the loop's pieces are small functions of it."""

    config: RunConfig
    run_dir: Path
    controls: Controls
    spec: TrainSpec
    objective: Objective | None  # the caller's (tests), else the config's once made; train() closes it
    interactive: bool
    state: TrainerState = field(default_factory=TrainerState)
    metrics: MetricsWriter | None = None  # process 0 writes metrics.jsonl
    dist: DistContext | None = None  # several processes (torchrun); None in one process
    sync: SyncedControls | None = None
    parts: Parts | None = None
    ckpt_val: dict[int, float | None] = field(default_factory=dict)  # each checkpoint's validation loss
    last_saved_step: int = -1
    last_checkpoint: Path | None = None
    rank_batch: int = 0  # a step's rows per process
    flushed_denormals: bool = False
    tuned_allocator: bool = False
    finished_cleanly: bool = False
    session_start: float = 0.0
    paused_s: float = 0.0
    notes: list[Event] = field(default_factory=list)  # said between steps (take_notes): a metrics write refused

    @property
    def is_main(self) -> bool:
        return self.dist is None or self.dist.is_main

    def flag(self, name: str) -> bool:
        assert self.sync is not None
        return self.sync.flag(name)

    def elapsed(self) -> float:
        """Training time of this run, earlier sessions included, pauses not."""
        return self.state.elapsed_s + time.perf_counter() - self.session_start - self.paused_s

    # events go to metrics.jsonl (flushed) before they reach the caller, so history survives a crash
    def emit(self, event: Event) -> Event:
        if self.metrics is not None and event.recorded:
            problem = self.metrics.write(event.to_dict())
            if problem:  # the event still reaches the caller; the warning follows at the next step
                self.notes.append(Log("warning", problem))
        return event

    def take_notes(self) -> list[Event]:
        notes, self.notes = self.notes, []
        if self.metrics is not None:  # recorded already: said live, not written again
            notes += [Log("warning", message) for message in self.metrics.take_warnings()]
        return notes

    # --- checkpoints: what a run saves and restores -------------------------------------------------------

    def restore(self, loaded: ckpt.LoadedCheckpoint, *, sharded: bool, truncate_metrics: bool = False) -> None:
        """Optimizer, scaler, data position, objective, RNG and the trainer state from a checkpoint."""
        parts = self.parts
        assert parts is not None
        saved = loaded.trainer_state
        optimizer_state = optimizer_state_from_flat(loaded.optimizer_tensors, loaded.optimizer_meta)
        if sharded:
            # each process keeps its shard
            dist_mod.load_optimizer_state(parts.model, parts.optimizer, optimizer_state)
        else:
            parts.optimizer.load_state_dict(optimizer_state)
        if parts.scaler is not None and saved.get("grad_scaler"):
            parts.scaler.load_state_dict(saved["grad_scaler"])
        parts.source.load_state_dict(saved["data"])
        if saved.get("objective") is not None:
            parts.objective.load_state_dict(saved["objective"])
        self.state = restore_state(saved, loaded.rng_tensors, self.spec, parts.ctx.device)
        self.last_saved_step = self.state.step
        if truncate_metrics and self.metrics is not None:
            self.metrics.truncate(int(saved.get("metrics_offset", 0)))
        self.remember_checkpoint_vals()

    def remember_checkpoint_vals(self) -> None:
        """Validation loss of each committed checkpoint (to keep the best one through retention)."""
        self.ckpt_val = {run_folder.step_of(path): run_folder.trainer_state(path).get("last_val_loss")
                        for path in run_folder.list_committed(self.run_dir)}

    def best_step(self) -> int | None:
        scored = [(v, s) for s, v in self.ckpt_val.items() if v is not None and math.isfinite(v)]
        return min(scored)[1] if scored else None

    def write_checkpoint(self) -> Path | None:
        """Save a checkpoint (FSDP: every process takes part; process 0 writes); apply retention."""
        parts = self.parts
        assert parts is not None
        model, optimizer = parts.model, parts.optimizer
        sharded = dist_mod.is_fsdp(model)
        # FSDP: every process hands its shards to process 0 (collectives: all of them call this), which writes.
        full_model = dist_mod.gathered_model_state(model) if sharded else None
        full_optimizer = dist_mod.gathered_optimizer_state(model, optimizer) if sharded else None
        if not self.is_main:
            self.last_saved_step = self.state.step
            return None
        saved, rng_tensors = checkpoint_state(self.state, self.spec, SavedParts(
            data=parts.source.state_dict(), objective=parts.objective.state_dict(),
            grad_scaler=parts.scaler.state_dict() if parts.scaler is not None else None,
            metrics_offset=self.metrics.offset() if self.metrics is not None else 0, elapsed_s=self.elapsed(),
            device=parts.ctx.device))
        opt_tensors, opt_meta = optimizer_state_to_flat(full_optimizer if sharded else optimizer)
        model_spec = parts.ctx.model_spec
        path = ckpt.save_checkpoint(self.run_dir, ckpt.CheckpointPayload(
            step=self.state.step, model=model, optimizer_tensors=opt_tensors, optimizer_meta=opt_meta,
            trainer_state=saved, run_config=self.config.to_dict(),
            model_spec=model_spec.to_dict() if model_spec else None, rng_tensors=rng_tensors,
            write_tokenizer=parts.write_tokenizer, model_state=full_model))
        self.last_saved_step = self.state.step
        self.last_checkpoint = path
        self.ckpt_val[self.state.step] = self.state.last_val_loss
        best = self.best_step()
        for removed in ckpt.apply_retention(self.run_dir, self.spec.keep_last, {best} if best is not None else set()):
            self.ckpt_val.pop(run_folder.step_of(removed), None)
        return path

    def result(self) -> dict[str, Any]:
        best = self.best_step()
        best_path = run_folder.checkpoints_dir(self.run_dir) / run_folder.checkpoint_name(best) \
            if best is not None else ""
        return {"run_dir": str(self.run_dir), "step": self.state.step, "tokens": self.state.tokens_seen,
                "checkpoint": str(self.last_checkpoint) if self.last_checkpoint else "",
                "best_val_loss": self.state.best_val_loss, "best_checkpoint": str(best_path),
                "nonfinite_steps": self.state.nonfinite_count}
