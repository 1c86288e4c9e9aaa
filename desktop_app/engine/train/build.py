"""The parts one train() call trains with, built once its device, precision, base and checkpoint are settled (the
loop's _start): the model placed, sharded and given its kernels, the objective with its context and batch source, the
optimizer and scaler; then every generator seeded, overwritten by the checkpoint's exact state when resuming, and the
micro-batch chosen. The order is the run's: a resumed run rebuilds exactly what it saved."""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.devices import PrecisionChoice, measure_matmul_peak
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Event, Log
from desktop_app.engine.model import fast_path
from desktop_app.engine.model.fast_path import KernelRequest
from desktop_app.engine.model.training_forward import TrainingModel
from desktop_app.engine.objectives import make_objective
from desktop_app.engine.objectives.base import Processes, TrainContext
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train import distributed as dist_mod
from desktop_app.engine.train import setup
from desktop_app.engine.train.auto_batch import choose_micro_batch
from desktop_app.engine.train.optim import build_optimizer, resolve_optimizer
from desktop_app.engine.train.run import Run
from desktop_app.engine.train.setup import Parts

if TYPE_CHECKING:
    from desktop_app.engine.model.folders import BaseModelInfo


@dataclass
class Found:
    """What the setup settled before the parts are built: the device and its precision, the base model (None: a model
    from a spec) and the checkpoint a resumed run continues from."""

    device: torch.device
    precision: PrecisionChoice
    base_info: BaseModelInfo | None
    loaded: ckpt.LoadedCheckpoint | None


def build_parts(run: Run, found: Found) -> list[Event]:
    """The model (placed, sharded, compiled), the objective and its source, the optimizer; then the seeded state,
    overwritten by the checkpoint's exact state when resuming. Sets run.parts; returns notes."""
    config, dist, device = run.config, run.dist, found.device
    store = TokenStore(config.dataset) if config.dataset else None
    prepared = setup.prepare_model(config, found.base_info, store, device, run.spec)
    model = prepared.model
    notes: list[Event] = [Log("info", note) for note in prepared.notes]
    notes += _place(run, prepared, found)
    forward_model, found_kernels = _kernels(run, prepared, device)
    notes += found_kernels
    if run.objective is None:

        run.objective = make_objective(config.objective)
    objective = run.objective
    wrapped = dist_mod.wrap(model, forward_model, objective.loss, dist, device)
    notes += [Log("info", n) for n in wrapped.notes]
    optimizer, why = _optimizer(run, model, device, prepared.quantized, found.loaded)
    notes += [Log("info", why)] if why else []
    scaler = torch.amp.GradScaler(device.type) if found.precision.use_grad_scaler else None
    ctx = _context(run, found, prepared, store)
    objective.setup(ctx, model)
    notes += objective.notes
    source = objective.batch_source(ctx)
    # MFU reference: the measured matmul peak of this machine (cached per process; before seeding, and with its own
    # generator, so it cannot disturb the training RNG). A GPU reaches its peak only on large matmuls.
    peak = measure_matmul_peak(device, found.precision.autocast_dtype or torch.float32,
                               size=8192 if device.type == "cuda" else 1024) if device.type != "mps" else 0.0
    run.parts = Parts(model, wrapped, optimizer, scaler, objective, source, ctx, prepared.write_tokenizer,
                      setup.flops_per_token(model, prepared.model_spec, adapter=prepared.adapter), peak,
                      source_shards=dist is not None and source.set_shard(dist.rank, dist.world),
                      fast=forward_model if isinstance(forward_model, TrainingModel) else None)
    # a step's rows per process (a rollout method's rounds are shared out by episode: its batch_size is not split)
    run.rank_batch = run.spec.batch_size // (dist.world if dist is not None and not config.is_rl else 1)
    return notes + _seed_and_restore(run, found)


def _place(run: Run, prepared: setup.Prepared, found: Found) -> list[Event]:
    """The checkpoint's weights when resuming, the model on its device in training mode (gradient checkpointing when
    asked), and FSDP's shards."""
    model, loaded, dist = prepared.model, found.loaded, run.dist
    notes: list[Event] = []
    if loaded is not None:
        if loaded.adapter != prepared.adapter:
            raise UserError(f"cannot resume: the checkpoint {loaded.path.name} holds "
                            f"{'an adapter' if loaded.adapter else 'a full model'} but the run config asks for "
                            f"{'an adapter' if prepared.adapter else 'full fine-tuning'}")
        ckpt.load_model_state(model, loaded.model_state)
    if not prepared.quantized:  # a 4-bit model is placed by its loader (bitsandbytes weights cannot move)
        model.to(found.device)
    if run.spec.gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        notes.append(Log("info", "gradient checkpointing on: less memory, ~30% more compute"))
    model.train()
    if dist is not None and dist.fsdp:  # shard after loading, quantizing and adapters; before the optimizer
        notes += [Log("info", n) for n in dist_mod.shard_fsdp(model, dist, found.device,
                                                              autocast_dtype=found.precision.autocast_dtype)]
    return notes


def _kernels(run: Run, prepared: setup.Prepared, device: torch.device) -> tuple[Any, list[Event]]:
    """The kernels (on CUDA the measured fast path; see model/fast_path.py) and the model the losses run through."""
    spec = run.spec
    request = KernelRequest(spec.kernels, spec.compile, spec.steps, quantized=prepared.quantized,
                            fsdp=run.dist is not None and run.dist.fsdp)
    choice = fast_path.choose_kernels(prepared.model, device, request)
    notes: list[Event] = [Log("warning" if choice.warning else "info", f"kernels {choice.name}: {choice.reason}")]
    forward_model, found = fast_path.prepare(prepared.model, choice, run.run_dir)
    return forward_model, notes + [Log("info", n) for n in found]


def _context(run: Run, found: Found, prepared: setup.Prepared, store: TokenStore | None) -> TrainContext:
    """What the objective is handed: the run's data and options, device, autocast, seed, tokenizer, base, reference."""
    config, device, dtype = run.config, found.device, found.precision.autocast_dtype

    def autocast() -> Any:
        return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    return TrainContext(run_dir=run.run_dir, config=config, train_spec=run.spec, device=device, autocast=autocast,
                        seed=config.seed, store=store, dataset_dir=Path(config.dataset) if config.dataset else None,
                        model_spec=prepared.model_spec, tokenizer=prepared.tokenizer, resumed=found.loaded is not None,
                        base=found.base_info, adapter=prepared.adapter, load_reference=prepared.load_reference,
                        processes=_processes(run.dist))


def _processes(dist: dist_mod.DistContext | None) -> Processes:
    """The processes of the run as the objective sees them (a rollout method shares out its rounds)."""
    return Processes() if dist is None else Processes(dist.rank, dist.world, dist.gather)


def _seed_and_restore(run: Run, found: Found) -> list[Event]:
    """Seed, then overwrite with the checkpoint's exact state when resuming; then the micro-batch (a step's rows per
    process at most, measured when asked)."""
    spec, dist, loaded, parts = run.spec, run.dist, found.loaded, run.parts
    assert parts is not None
    notes: list[Event] = []
    torch.manual_seed(run.config.seed)
    random.seed(run.config.seed)
    np.random.seed(run.config.seed % (2**32))
    run.state.micro_batch = spec.micro_batch
    if loaded is not None:
        run.restore(loaded, sharded=dist_mod.is_fsdp(parts.model))
        run.last_checkpoint = loaded.path
        notes.append(Log("info", f"resumed from {loaded.path.name} (step {loaded.step})"))
    elif run.is_main:
        run.remember_checkpoint_vals()
    run.state.micro_batch = min(run.state.micro_batch, run.rank_batch)  # a step's rows per process
    if spec.auto_micro_batch:
        run.state.micro_batch, why = choose_micro_batch(parts, dist, run.rank_batch, run.state.micro_batch,
                                                        found.precision.name)
        notes.append(Log("info", why))
    return notes


def _optimizer(run: Run, model: torch.nn.Module, device: torch.device, quantized: bool,
               loaded: ckpt.LoadedCheckpoint | None) -> tuple[torch.optim.Optimizer, str]:
    """The optimizer the spec asks for on this device (and why, when not plain AdamW)."""
    kind, why = resolve_optimizer(run.spec.optimizer, device, quantized=quantized)
    if run.dist is not None and run.dist.fsdp and kind != "adamw":  # auto on a 4-bit base (checked above)
        kind, why = "adamw", "AdamW (8-bit AdamW cannot update FSDP's sharded parameters)"
    if loaded is not None:
        setup.check_optimizer_state(loaded.optimizer_tensors, kind)
    return build_optimizer(model, run.spec, device, kind=kind), f"optimizer: {why}" if kind != "adamw" else ""
