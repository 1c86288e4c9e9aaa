"""Too big for this machine: refused before anything is allocated, or, where the estimate was wrong, an out-of-memory
reported in the same words, with every committed checkpoint left as it was.

Two gates, both on the app's own estimate (model/sizing.py, as preflight.memory_finding computes it):
- the front ends' preflight (the window's Start, the CLI's check before start, --force to override): the estimate,
  about +-40%, against the memory free now;
- `check_fits`, which train() runs for every run (new or resumed, from the window, the CLI or the server) before the
  model is built: it refuses only what cannot fit whatever is closed or forced: the weights, gradients and optimizer
  state alone (exact counts, no activation guess) beyond all the memory the device has. Several processes (torchrun)
  are not checked here: FSDP shards those parts, and each process picks its GPU later.

`is_out_of_memory` recognises the allocators' errors (torch.OutOfMemoryError, the CPU allocator's "can't allocate
memory", MemoryError, and the step's own give-up at a micro-batch of 1); `out_of_memory_error` words them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Finished, Log
from desktop_app.engine.model.sizing import estimate_training_memory, human_bytes
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train.memory_plan import (
    FITS_SHARE,
    Machine,
    MemoryPlan,
    memory_budget,
    memory_plan,
    this_machine,
)
from desktop_app.engine.train.preflight import change_groups, what_fits

# An 8-bit AdamW keeps two 1-byte states per parameter (plus small block scales) instead of two fp32 ones.
EIGHT_BIT_OPTIMIZERS = ("adamw8bit", "paged_adamw8bit")
_CHAIN_DEPTH = 4  # how far down __cause__/__context__ an out-of-memory is looked for


class TooBigForMachine(UserError):
    """A run that cannot fit the memory of the device that would train it: the estimate, what there is, what fits."""


@dataclass(frozen=True)
class OomMoment:
    """Where an out-of-memory struck: the step it was computing (0: during the setup), on which device, with which
    micro-batch, and the run folder (its newest committed checkpoint is named in the message)."""

    step: int
    device: str
    micro_batch: int
    run_dir: Path | None = None


def is_out_of_memory(exc: BaseException | None) -> bool:
    """True for an allocator's out-of-memory (CUDA, MPS, the CPU's, Python's MemoryError), also when it is the
    cause of another error (the step's retry giving up at a micro-batch of 1)."""
    from desktop_app.engine.devices import is_out_of_memory as allocator_error  # lazy: torch

    for _ in range(_CHAIN_DEPTH):
        if exc is None:
            return False
        if isinstance(exc, MemoryError) or allocator_error(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def fixed_bytes(plan: MemoryPlan, optimizer: str = "auto") -> int:
    """What a run holds whatever its batch: weights, gradients and optimizer state (exact counts; 8-bit AdamW
    keeps a quarter of AdamW's state)."""
    est = estimate_training_memory(plan.spec, plan.shape)
    eight_bit = optimizer in EIGHT_BIT_OPTIMIZERS or (optimizer == "auto" and plan.shape.adapter == "qlora")
    return est["weights"] + est["gradients"] + (est["optimizer"] // 4 if eight_bit else est["optimizer"])


def device_memory(device: str, machine: Machine) -> tuple[str, int, int] | None:
    """(what the run draws on, free bytes, total bytes) of a resolved device ("cpu", "cuda", "mps"); None where
    the machine does not say."""
    budget = memory_budget("cuda" if device == "cuda" else "cpu", machine)
    if budget is None:
        return None
    where, free, gpu = budget
    return where, free, machine.gpu_total if gpu else machine.ram_total


def check_fits(config: RunConfig, device: str, machine: Machine) -> None:
    """Refuse (TooBigForMachine) a run whose weights, gradients and optimizer state alone exceed all the memory of
    `device` ("cpu", "cuda", "mps"): no setting short of those named, and no program closed, makes room."""
    memory = device_memory(device, machine)
    train = config.train_spec()
    plan = memory_plan(config, train, device == "cuda") if memory else None
    if memory is None or plan is None or not memory[2]:
        return
    where, free, total = memory
    fixed = fixed_bytes(plan, train.optimizer)
    if fixed <= total:
        return
    raise TooBigForMachine(
        f"This run cannot fit {where}: its weights, gradients and optimizer state alone need about "
        f"{human_bytes(fixed)} (whatever the batch), more than the {human_bytes(total)} it has in all "
        f"({human_bytes(free)} free). {fits_instead(plan, free)}")


def fits_instead(plan: MemoryPlan, free: int) -> str:
    """What would fit where the weights, gradients and optimizer state alone are too much: adapters on a base
    (LoRA, QLoRA: preflight's wording), else only a smaller model; a smaller batch never does."""
    if plan.finetune and plan.shape.adapter == "none":
        return what_fits(plan, free)
    return "Only a smaller model (Model tab), or a machine with more memory, would fit: a smaller batch does not."


def refuse_before_start(config: RunConfig) -> None:
    """`check_fits` on this machine, for the device the run would train on; one process only (see the module)."""
    from desktop_app.engine.devices import resolve_device  # lazy: torch
    from desktop_app.engine.train.distributed import launched_world_size  # lazy: torch

    if launched_world_size() > 1:
        return
    device = resolve_device(config.train_spec().device).type
    check_fits(config, device, this_machine(probe_gpu=device == "cuda"))


def out_of_memory_error(config: RunConfig, moment: OomMoment, machine: Machine | None = None) -> UserError:
    """The one-paragraph report of an out-of-memory: where, the app's estimate at the micro-batch that failed, what
    the device has free, settings that need less, and the newest committed checkpoint, intact."""
    where = f"at step {moment.step}" if moment.step > 0 else "while building the model and optimizer"
    memory = device_memory(moment.device, machine or this_machine(probe_gpu=moment.device == "cuda"))
    train = config.train_spec()
    plan = memory_plan(config, train, moment.device == "cuda")
    parts = [f"Out of memory {where} on {memory[0] if memory else moment.device} "
             f"(micro-batch {max(1, moment.micro_batch)})."]
    if plan is not None and memory is not None:
        plan = dataclasses.replace(plan, shape=dataclasses.replace(
            plan.shape, batch_size=max(1, moment.micro_batch) * plan.rows))
        total = estimate_training_memory(plan.spec, plan.shape)["total"]
        parts.append(f"The app's estimate for it is about {human_bytes(total)} (it can be 40% off) and "
                     f"{human_bytes(memory[1])} is free now.")
        parts.append(lighter_settings(plan, total, memory[1]))
    parts.append(checkpoint_note(moment.run_dir))
    return UserError(" ".join(p for p in parts if p))


def lighter_settings(plan: MemoryPlan, total: int, free: int) -> str:
    """What would fit `free` by the estimate; where the estimate already said it fits (so it was wrong here), the
    settings of each kind that need about half as much or less."""
    if total > free * FITS_SHARE:
        return what_fits(plan, free)
    target = total // 2
    found = []
    for group in change_groups(plan, target):
        sized = [(label, estimate_training_memory(plan.spec, shape)["total"]) for label, shape in group]
        label, need = next(((lb, n) for lb, n in sized if n <= target), sized[-1])
        found.append(f"{label}: about {human_bytes(need)}")
    smaller = "" if plan.finetune else "; or a smaller model (Model tab)"
    return ("Settings that need less: " + "; ".join(found) + smaller + ".") if found else \
        "A smaller model, or a machine with more memory, would fit."


def checkpoint_note(run_dir: Path | None) -> str:
    """The newest committed checkpoint (untouched by the failure) and how to go on from it."""
    if run_dir is None:
        return ""
    committed = run_folder.list_committed(run_dir) if run_dir.is_dir() else []
    if not committed:
        return "No checkpoint had been saved yet; start the run again with one of those settings."
    last = committed[-1]
    return (f"The last checkpoint ({last.name}, step {run_folder.step_of(last)}) is intact: resume from it once "
            f"memory is free (Resume in the Train tab, or `train --resume {run_dir}`).")


def moment_of(run: Any) -> OomMoment:
    """The OomMoment of a train() call (engine/train/run.py's Run): the step being computed, its device and
    micro-batch (the setup's, before the parts exist)."""
    parts = getattr(run, "parts", None)
    device = str(parts.ctx.device.type) if parts is not None else str(run.spec.device)
    if device == "auto":
        from desktop_app.engine.devices import resolve_device  # lazy: torch

        device = resolve_device("auto").type
    step = run.state.step + 1 if parts is not None else 0
    micro = run.state.micro_batch if parts is not None else (run.spec.micro_batch_size or run.spec.batch_size)
    return OomMoment(step, device, int(micro), Path(run.run_dir))


def report_out_of_memory(run: Any, exc: BaseException) -> Iterator[Any]:
    """In train(): an out-of-memory during the steps ends the run with the report (a Log and Finished("failed"),
    through run.emit, like other failures in training); during the setup it is raised as the UserError it is."""

    error = out_of_memory_error(run.config, moment_of(run))
    if run.parts is None:
        raise error from exc
    message = str(error)
    yield run.emit(Log("error", message))
    yield run.emit(Finished("failed", step=run.state.step, message=message, result=run.result()))
    run.finished_cleanly = True
