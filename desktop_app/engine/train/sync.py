"""What the loop does differently when several processes train one run (torchrun), kept apart from the loop:
the controls every process agreed on, this process's rows of a step's batch, its GPU, and what such a run refuses.
In one process every function here is a pass-through (dist is None).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls
from desktop_app.engine.objectives.base import Objective
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train.distributed import DistContext

FLAGS = ("stop", "save_now", "pause")


class SyncedControls:
    """The stop / save-now / pause flags the loop acts on. One process reads its Controls directly; several act on
    the flags all of them agreed on at the last step's sync (a signal reaching one process between syncs must not
    make it leave the others)."""

    def __init__(self, controls: Controls, dist: DistContext | None):
        self.controls, self.dist = controls, dist
        self.synced = dict.fromkeys(FLAGS, False)

    def flag(self, name: str) -> bool:
        return self.synced[name] if self.dist is not None else getattr(self.controls, name).is_set()

    def clear_save_now(self) -> None:
        self.controls.save_now.clear()
        self.synced["save_now"] = False

    def _set(self, *, stop: bool, save_now: bool, pause: bool) -> None:
        self.synced.update(stop=stop, save_now=save_now, pause=pause)
        if stop:
            self.controls.stop.set()  # so this process's own checks (and its caller) see it too
        if save_now:
            self.controls.save_now.set()

    def sync_step(self, loss_sum: torch.Tensor, grad_norm: torch.Tensor, metric_sums: dict[str, Any],
                  tokens: int) -> tuple[float, float, dict[str, float], int]:
        """One all-reduce per step: the mean loss and metrics over processes, the tokens of all of them, and the
        control flags (any process's stop / save now / pause reaches all). The gradient norm is the same everywhere
        (gradients are averaged before it is taken)."""
        assert self.dist is not None
        names = sorted(metric_sums)
        flags = [float(getattr(self.controls, f).is_set()) for f in FLAGS]
        values = [float(loss_sum), *(float(metric_sums[n]) for n in names), float(tokens), *flags]
        total = self.dist.sum(values)
        world = self.dist.world
        loss = total[0] / world
        metrics = {n: total[1 + i] / world for i, n in enumerate(names)}
        stop, save_now, pause = (v > 0 for v in total[-3:])
        self._set(stop=stop, save_now=save_now, pause=pause)
        return loss, float(grad_norm), metrics, int(total[1 + len(names)])

    def wait_while_paused(self, poll_s: float = 0.25) -> None:
        """Pause: one process waits on its flags; several ask each other every poll_s until none is paused."""
        if self.dist is None:
            self.controls.wait_while_paused()
            return
        while True:
            stop, pause = self.dist.sum([float(self.controls.stop.is_set()), float(self.controls.pause.is_set())],
                                        "waiting out a pause")
            if stop or not pause:
                self.synced["pause"] = False
                if stop:
                    self._set(stop=True, save_now=self.synced["save_now"], pause=False)
                return
            self.controls.stop.wait(poll_s)


def rank_device(device: torch.device) -> torch.device:
    """This process's GPU under torchrun (cuda:LOCAL_RANK); the CPU stays the CPU."""
    if device.type != "cuda":
        return device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local >= torch.cuda.device_count():
        raise UserError(f"process {local} on this machine has no GPU of its own ({torch.cuda.device_count()} "
                        "visible): start at most one process per GPU (--nproc_per_node)")
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def check_run(dist: DistContext | None, config: RunConfig, spec: TrainSpec) -> None:
    """What a run over several processes refuses, before anything is loaded (one process: nothing)."""
    if dist is None:
        return
    if config.is_rl and dist.fsdp:
        raise UserError(f"{config.objective} decodes its episodes with the whole model in every process, which FSDP's "
                        "sharded model does not hold: use distributed.strategy ddp")
    if not config.is_rl and spec.batch_size % dist.world:  # a rollout method shares out its rounds' episodes
        raise UserError(f"batch_size {spec.batch_size} cannot be split over {dist.world} processes: use a multiple of "
                        f"{dist.world} (each process trains batch_size / {dist.world} sequences of every step)")
    if dist.fsdp and spec.optimizer in ("adamw8bit", "paged_adamw8bit"):
        raise UserError(f"optimizer {spec.optimizer} (bitsandbytes) cannot update FSDP's sharded parameters: set "
                        "optimizer to adamw or auto, or use distributed.strategy ddp")
    if dist.fsdp and spec.nonfinite_policy == "rollback":
        raise UserError("nonfinite_policy rollback reloads a checkpoint into the model mid-run, which FSDP's "
                        "sharded model does not support here: use skip, or distributed.strategy ddp")


def rows_for_rank(dist: DistContext | None, objective: Objective, batch: Any, *, source_shards: bool,
                  batch_size: int) -> Any:
    """This process's share of a step's batch (rows rank*B/N .. (rank+1)*B/N of the global order).

    A source that read only this process's rows (`source_shards`) has nothing to cut; an objective whose loss is
    normalised over the whole step (SFT: by its loss-bearing tokens) shards the batch itself, keeping what it
    needs of the whole; other batches are row-sliced."""
    if dist is None or source_shards:
        return batch
    mine = objective.shard(batch, dist.rank, dist.world)
    if mine is not None:
        return mine
    if isinstance(batch, (list, tuple, torch.Tensor)) and len(batch) == batch_size:
        per = batch_size // dist.world
        return batch[dist.rank * per:(dist.rank + 1) * per]
    raise UserError(f"the {objective.name} method cannot split its batches over several processes")
